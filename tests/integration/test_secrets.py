"""The API keys as Ansible users keep them: an inline !vault value, a vars file vaulted whole and a
vaulted -e @file are accepted; a key written in plain text in a file is refused by name and file, with
both ways of vaulting it; a vaulted key this run cannot open gets the toolkit's hint. The logic
(plugins/plugin_utils/sglang_sm120_controller/secret_sources.py) on files made by the real ansible-vault, then
the role's own check (roles/sglang_service/tasks/release_inputs.yml) run by ansible-playbook."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from sglang_sm120_controller import secret_sources as ss

BIN = Path(sys.executable).parent
KEY = "k3y-6f1c0d9e2b7a4c58"
ADMIN = "adm-0b5e9c1d7a3f2468"
PASSWORD = "test-vault-password"


def vault_env(password_file: Path | None) -> dict[str, str]:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    env.pop("ANSIBLE_VAULT_PASSWORD_FILE", None)
    if password_file is not None:
        env["ANSIBLE_VAULT_PASSWORD_FILE"] = str(password_file)
    env["ANSIBLE_CACHE_PLUGIN"] = "memory"
    env["ANSIBLE_PYTHON_INTERPRETER"] = sys.executable
    return env


@pytest.fixture
def password_file(tmp_path: Path) -> Path:
    path = tmp_path / "vault-password.txt"
    path.write_text(PASSWORD + "\n")
    return path


def encrypt_file(path: Path, password_file: Path) -> None:
    """ansible-vault encrypt, as an operator vaults a whole vars file."""
    subprocess.run([str(BIN / "ansible-vault"), "encrypt", str(path)], env=vault_env(password_file), check=True, capture_output=True)


def vaulted(path: Path, text: str, password_file: Path) -> Path:
    """`path` written with `text`, then vaulted whole (encrypt_file)."""
    path.write_text(text)
    encrypt_file(path, password_file)
    return path


def encrypt_string(value: str, name: str, password_file: Path) -> str:
    """ansible-vault encrypt_string --name, as an operator vaults one value."""
    proc = subprocess.run(
        [str(BIN / "ansible-vault"), "encrypt_string", value, "--name", name],
        env=vault_env(password_file),
        check=True,
        capture_output=True,
        text=True,
    )
    return proc.stdout


# The logic, on files the real ansible-vault wrote


def test_a_whole_file_vault_is_recognised_by_its_header_and_a_plain_file_is_not(tmp_path: Path, password_file: Path) -> None:
    vault = tmp_path / "vault.yml"
    vault.write_text(f"sglang_service_api_key: {KEY}\n")
    assert not ss.is_vault_encrypted(vault.read_text())
    encrypt_file(vault, password_file)
    assert ss.is_vault_encrypted(vault.read_text()) and KEY not in vault.read_text()


def test_the_plaintext_search_finds_the_key_as_one_token_only() -> None:
    text = f"a: 1\nsglang_service_api_key: {KEY}\nb: 'x{KEY}'\nc: {KEY}-longer\nd: \"{KEY}\"\n"
    assert ss.plaintext_lines(text, KEY) == [2, 5]
    assert ss.plaintext_lines(text, "") == []


def test_definitions_are_found_at_any_depth_with_how_each_is_written(password_file: Path) -> None:
    inline = encrypt_string(KEY, "sglang_service_api_key", password_file)
    inventory = (
        "all:\n  hosts:\n    gpu-01:\n      sglang_service_admin_api_key: \"{{ lookup('ansible.builtin.env', 'ADMIN') }}\"\n"
        f"  vars:\n    sglang_service_admin_api_key: {ADMIN}\n"
    )
    found = ss.definitions_in(inventory, "sglang_service_admin_api_key", "/inv/hosts.yml")
    assert [(d.line, d.form) for d, _ in found] == [(4, "template"), (6, "plain")]
    found = ss.definitions_in("---\n" + inline, "sglang_service_api_key", "/inv/host_vars/gpu-01.yml")
    assert [(d.line, d.form) for d, _ in found] == [(2, "inline-vault")]
    assert ss.definitions_in("[gpu]\ngpu-01 sglang_service_api_key=x\n", "sglang_service_api_key", "/inv/hosts") == []


def files_of(*items: tuple[Path, str], decrypt: dict[str, str] | None = None) -> list[ss.VarsFile]:
    out = []
    for path, kind in items:
        vars_file = ss.read_vars_file(str(path), kind, (lambda p: (decrypt or {}).get(p)) if decrypt is not None else None)
        assert vars_file is not None
        out.append(vars_file)
    return out


def test_a_key_in_plain_text_in_a_file_is_refused_by_file_and_line_with_both_ways_to_vault_it(tmp_path: Path) -> None:
    host_vars = tmp_path / "host_vars"
    host_vars.mkdir()
    (host_vars / "gpu-01.yml").write_text(f"sglang_service_port: 30000\nsglang_service_api_key: {KEY}\n")
    verdict = ss.classify_key("sglang_service_api_key", KEY, files_of((host_vars / "gpu-01.yml", "inventory")))
    assert verdict.refused and verdict.status == "plain-in-file"
    message = verdict.as_dict()["message"]
    assert f"sglang_service_api_key: the key is written in plain text in {host_vars / 'gpu-01.yml'}:2" in message
    assert "ansible-vault encrypt_string --name sglang_service_api_key" in message and "run ansible-vault encrypt on it" in message
    assert KEY not in json.dumps(verdict.as_dict())


def test_the_three_vaulted_forms_are_accepted(tmp_path: Path, password_file: Path) -> None:
    inline = tmp_path / "inline.yml"
    inline.write_text(encrypt_string(KEY, "sglang_service_api_key", password_file))
    whole = vaulted(tmp_path / "vault.yml", f"sglang_service_api_key: {KEY}\n", password_file)
    extra = vaulted(tmp_path / "secrets.yml", f"sglang_service_admin_api_key: {ADMIN}\n", password_file)
    decrypted = {str(whole): f"sglang_service_api_key: {KEY}\n", str(extra): f"sglang_service_admin_api_key: {ADMIN}\n"}

    for path, kind, name, value, form in [
        (inline, "inventory", "sglang_service_api_key", KEY, "inline-vault"),
        (whole, "inventory", "sglang_service_api_key", KEY, "whole-file-vault"),
        (extra, "extra-vars", "sglang_service_admin_api_key", ADMIN, "whole-file-vault"),
    ]:
        verdict = ss.classify_key(name, value, files_of((path, kind), decrypt=decrypted))
        assert not verdict.refused and verdict.status == "vaulted", verdict
        assert [d.form for d in verdict.definitions] == [form]


def test_a_plain_value_that_another_definition_overrides_is_warned_about(tmp_path: Path) -> None:
    group_vars = tmp_path / "service.yml"
    group_vars.write_text('sglang_service_api_key: ""\nsglang_service_admin_api_key: old-plain-admin-key\n')
    verdict = ss.classify_key("sglang_service_admin_api_key", ADMIN, files_of((group_vars, "inventory")))
    assert not verdict.refused and verdict.status == "indirect"
    assert len(verdict.warnings) == 1 and f"{group_vars}:2 holds a plain value" in verdict.warnings[0]
    assert "old-plain-admin-key" not in verdict.warnings[0]
    empty = ss.classify_key("sglang_service_api_key", "", files_of((group_vars, "inventory")))
    assert empty.status == "unset" and not empty.refused and not empty.warnings


def test_a_key_on_the_command_line_is_warned_about_not_refused() -> None:
    verdict = ss.classify_key("sglang_service_api_key", KEY, [], command_line=[json.dumps({"sglang_service_api_key": KEY})])
    assert not verdict.refused and verdict.status == "plain-on-command-line"
    assert "-e @secrets.yml" in verdict.warnings[0] and KEY not in verdict.warnings[0]


def test_a_key_with_whitespace_and_an_undecryptable_key_are_refused_with_what_to_do() -> None:
    spaced = ss.classify_key("sglang_service_api_key", "two words", [])
    assert spaced.refused and "expected one word" in spaced.problems[0]
    locked = ss.classify_key("sglang_service_api_key", None, [], undecryptable="no vault secrets found")
    assert locked.refused and locked.status == "undecryptable"
    assert "--ask-vault-pass" in locked.problems[0] and "ANSIBLE_VAULT_PASSWORD_FILE" in locked.problems[0]


def test_the_candidate_files_are_the_inventory_the_playbook_vars_and_the_extra_vars_files(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory"
    (inventory / "host_vars" / "gpu-01").mkdir(parents=True)
    (inventory / "group_vars" / "all").mkdir(parents=True)
    (inventory / "hosts.yml").write_text("all: {}\n")
    (inventory / "host_vars" / "gpu-01" / "vault.yml").write_text("x: 1\n")
    (inventory / "group_vars" / "all" / "stack.yml").write_text("x: 1\n")
    (inventory / "group_vars" / "all" / "notes.txt").write_text("not read by Ansible\n")
    (inventory / ".hidden.yml").write_text("x: 1\n")
    playbooks = tmp_path / "playbooks"
    (playbooks / "group_vars").mkdir(parents=True)
    (playbooks / "group_vars" / "all.yml").write_text("x: 1\n")
    extra = tmp_path / "secrets.yml"
    extra.write_text("x: 1\n")

    by_dir = dict(ss.candidate_files([str(inventory), "gpu-01,gpu-02"], str(playbooks), [f"@{extra}", "a=b"]))
    assert by_dir == {
        str(inventory / "group_vars/all/stack.yml"): "inventory",
        str(inventory / "host_vars/gpu-01/vault.yml"): "inventory",
        str(inventory / "hosts.yml"): "inventory",
        str(playbooks / "group_vars/all.yml"): "playbook-vars",
        str(extra): "extra-vars",
    }
    by_file = dict(ss.candidate_files([str(inventory / "hosts.yml")], None, []))
    assert set(by_file) == {str(inventory / p) for p in ("hosts.yml", "host_vars/gpu-01/vault.yml", "group_vars/all/stack.yml")}


# The role's check, run by ansible-playbook against a tiny inventory

PLAY = """
- name: Check the keys as a deploy does
  hosts: all
  gather_facts: false
  roles:
    - role: sm120.sglang.toolkit_defaults
  tasks:
    - name: Run the service role's release inputs
      ansible.builtin.include_role:
        name: sm120.sglang.sglang_service
        tasks_from: release_inputs
      vars:
        sglang_service_launch_plan: {profile: p, argv: [], env: {}, launch_module: sglang.launch_server}
    - name: Show what the release's key records (never the key)
      ansible.builtin.debug:
        msg: "api_keys={{ sglang_service_release_inputs.unit.api_keys }}"
"""


def deploy_check(tmp_path: Path, host_vars: dict[str, str], args: list[str], password_file: Path | None) -> subprocess.CompletedProcess:
    inventory = tmp_path / "inventory"
    (inventory / "host_vars" / "gpu-01").mkdir(parents=True, exist_ok=True)
    host = f"gpu-01:\n      ansible_connection: local\n      ansible_python_interpreter: {sys.executable}\n"
    (inventory / "hosts.yml").write_text("all:\n  hosts:\n    " + host)
    for name, text in host_vars.items():
        (inventory / "host_vars" / "gpu-01" / name).write_text(text)
    playbook = tmp_path / "check.yml"
    playbook.write_text(PLAY)
    cmd = [str(BIN / "ansible-playbook"), "-i", str(inventory), str(playbook), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=vault_env(password_file), cwd=ROOT, check=False)


def test_the_role_accepts_a_whole_file_vault_an_inline_vault_and_a_vaulted_extra_vars_file(tmp_path: Path, password_file: Path) -> None:
    vault = vaulted(tmp_path / "vault.yml", f"sglang_service_api_key: {KEY}\n", password_file)
    secrets = vaulted(tmp_path / "secrets.yml", f"sglang_service_admin_api_key: {ADMIN}\n", password_file)
    for host_vars, args in [
        ({"vault.yml": vault.read_text()}, []),
        ({"main.yml": encrypt_string(KEY, "sglang_service_api_key", password_file)}, []),
        ({}, ["-e", f"@{secrets}"]),
    ]:
        proc = deploy_check(tmp_path / str(len(args)) / next(iter(host_vars), "extra"), host_vars, args, password_file)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-3000:]
        assert "api_keys=True" in out and KEY not in out and ADMIN not in out


def test_the_role_refuses_a_plain_key_in_host_vars_and_in_an_extra_vars_file_naming_the_file(tmp_path: Path) -> None:
    plain = tmp_path / "plain-secrets.yml"
    plain.write_text(f"sglang_service_admin_api_key: {ADMIN}\n")
    proc = deploy_check(tmp_path, {"main.yml": f"sglang_service_api_key: {KEY}\n"}, ["-e", f"@{plain}"], None)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"sglang_service_api_key: the key is written in plain text in {tmp_path}/inventory/host_vars/gpu-01/main.yml:1" in out
    assert f"sglang_service_admin_api_key: the key is written in plain text in {plain}:1" in out
    assert "ansible-vault encrypt_string --name sglang_service_api_key" in out and "nothing was built or changed" in out
    assert KEY not in out and ADMIN not in out and "api_keys=" not in out


def test_the_role_gives_its_own_hint_when_a_vaulted_key_cannot_be_opened(tmp_path: Path, password_file: Path) -> None:
    inline = encrypt_string(KEY, "sglang_service_api_key", password_file)
    proc = deploy_check(tmp_path, {"main.yml": inline}, [], None)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "sglang_service_api_key: the key is vaulted but this run cannot open it" in out, out[-3000:]
    assert "--ask-vault-pass" in out and "ANSIBLE_VAULT_PASSWORD_FILE" in out and "api_keys=" not in out
    token = encrypt_string("hf-token-value-1", "HF_TOKEN", password_file).replace("\n", "\n  ")
    proc = deploy_check(tmp_path / "secrets", {"main.yml": "sglang_service_secrets:\n  " + token}, [], None)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "sglang_service_secrets: holds a vaulted value this run cannot open" in out, out[-3000:]
    wrong = tmp_path / "wrong-password.txt"
    wrong.write_text("not-the-password\n")
    proc = deploy_check(tmp_path / "wrong", {"main.yml": inline}, [], wrong)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "api_keys=" not in out
    assert "sglang_service_api_key: the key is vaulted but this run cannot open it" in out and "Decryption failed" in out, out[-3000:]


def test_the_files_ansible_reads_for_a_host_are_found_and_the_vaulted_one_named(tmp_path: Path, password_file: Path) -> None:
    host_vars = tmp_path / "host_vars"
    (host_vars / "gpu-01").mkdir(parents=True)
    (host_vars / "gpu-01.yml").write_text("a: 1\n")
    (host_vars / "gpu-01" / "main.yml").write_text("b: 1\n")
    (host_vars / "gpu-01" / "vault").write_text(f"sglang_service_api_key: {KEY}\n")
    (host_vars / "gpu-01" / "README.txt").write_text("not read by Ansible\n")
    (host_vars / "gpu-02.yml").write_text("c: 1\n")
    files = ss.vars_files_of(tmp_path, "host_vars", "gpu-01")
    assert files == [host_vars / "gpu-01.yml", host_vars / "gpu-01" / "main.yml", host_vars / "gpu-01" / "vault"]
    assert ss.first_vault_encrypted(files) is None
    encrypt_file(host_vars / "gpu-01" / "vault", password_file)
    assert ss.first_vault_encrypted(files) == host_vars / "gpu-01" / "vault"


def test_a_deploy_without_the_vault_password_stops_with_the_toolkits_hint_naming_the_vaulted_file(
    tmp_path: Path, password_file: Path
) -> None:
    """Ansible reads a vars file vaulted whole before any task; the vars plugin next to the playbooks
    (plugins/vars/sglang_vault_hint.py) speaks first. With the password, it stays silent
    (a playbook whose first task changes nothing: unlock.yml's confirmation); with a wrong one it names the file."""
    inventory = tmp_path / "inventory"
    (inventory / "host_vars" / "gpu-01").mkdir(parents=True)
    (inventory / "hosts.yml").write_text("all:\n  hosts:\n    gpu-01:\n      ansible_connection: local\n")
    vault = vaulted(inventory / "host_vars" / "gpu-01" / "vault.yml", f"sglang_service_api_key: {KEY}\n", password_file)
    cmd = [str(BIN / "ansible-playbook"), "-i", str(inventory), str(ROOT / "playbooks/unlock.yml")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=vault_env(None), cwd=ROOT, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"{vault} is vault-encrypted (ansible-vault encrypt) and this run was given no vault password" in out, out[-2000:]
    assert "--ask-vault-pass" in out and "Attempting to decrypt but no vault secrets found" not in out
    # with it, the play's first task runs (unlock.yml's confirmation, which refuses without sglang_unlock_force)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=vault_env(password_file), cwd=ROOT, check=False)
    out = proc.stdout + proc.stderr
    assert "Breaking the deploy lock lets a new run change a host" in out and "vault-encrypted" not in out, out[-2000:]
    # a wrong password: the file is named, and which password file the run reads, not Ansible's bare "Decryption failed"
    wrong = tmp_path / "wrong-pass"
    wrong.write_text("not the password\n")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=vault_env(wrong), cwd=ROOT, check=False)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0
    assert f"{vault} is vault-encrypted (ansible-vault encrypt) and none of the vault passwords this run was given opens it" in out, out[
        -2000:
    ]
    assert "ANSIBLE_VAULT_PASSWORD_FILE" in out and f"ansible-vault view {vault}" in out


def test_listening_beyond_loopback_needs_a_key(tmp_path: Path, password_file: Path) -> None:
    import json

    plan = {"profile": "p", "argv": [], "env": {}, "launch_module": "sglang.launch_server", "flags": {"host": "0.0.0.0"}}
    args = ["-e", json.dumps({"sglang_service_launch_plan": plan})]
    proc = deploy_check(tmp_path / "open", {}, args, None)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "sglang_service_host is 0.0.0.0: SGLang would serve anyone who reaches that address" in out
    assert "nothing was built or changed" in out and "api_keys=" not in out
    vault = vaulted(tmp_path / "vault.yml", f"sglang_service_api_key: {KEY}\n", password_file)
    keyed = deploy_check(tmp_path / "keyed", {"vault.yml": vault.read_text()}, args, password_file)
    assert keyed.returncode == 0 and "api_keys=True" in keyed.stdout, (keyed.stdout + keyed.stderr)[-3000:]
    loopback = {**plan, "flags": {"host": "127.0.0.1"}}
    local = deploy_check(tmp_path / "local", {}, ["-e", json.dumps({"sglang_service_launch_plan": loopback})], None)
    assert local.returncode == 0 and "api_keys=False" in local.stdout, (local.stdout + local.stderr)[-3000:]
