"""The operator's site owns its inventory; the toolkit's settings are the defaults of role sm120.sglang.toolkit_defaults
(issue 45): the example site holds plain files and no toolkit pin, a toolkit update reaches a site that did not override
a setting, and the site's own value wins over the toolkit's without editing the toolkit's files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from conftest import ROOT

SITE = ROOT / "inventory" / "example-site"
DEFAULTS = ROOT / "roles" / "toolkit_defaults" / "defaults" / "main"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"

PLAY = """
- name: Render what the site gets
  hosts: gpu-01
  gather_facts: false
  roles:
    - role: sm120.sglang.toolkit_defaults
  tasks:
    - name: Write the values
      ansible.builtin.copy:
        dest: "{{ out }}"
        content: "{{ {'cuda': stack_cuda_version, 'sglang': stack_sglang_version, 'root': sglang_root,
          'build_root': sglang_build_root, 'user': ansible_user} | to_json }}"
        mode: "0644"
      delegate_to: localhost
"""


def toolkit_keys() -> set[str]:
    keys: set[str] = set()
    for path in DEFAULTS.glob("*.yml"):
        keys |= set(yaml.safe_load(path.read_text()) or {})
    return keys


def set_values(directory: Path) -> dict[str, object]:
    values: dict[str, object] = {}
    for path in sorted(directory.rglob("*.yml")):
        values.update(yaml.safe_load(path.read_text()) or {})
    return values


def test_the_example_site_holds_plain_files_and_no_toolkit_pin() -> None:
    files = [p for p in SITE.rglob("*") if p.is_file() or p.is_symlink()]
    assert files and not [p for p in files if p.is_symlink()], "the example site must hold no links"
    pinned = sorted(k for k in set_values(SITE / "group_vars") if k.startswith("stack_") or k in {"sglang_build_specs", "sglang_profiles"})
    assert not pinned, f"the example site's group_vars set toolkit pins: {pinned}"
    # what the site sets in group_vars is the operator's own: none of the toolkit's shipped settings
    assert not set(set_values(SITE / "group_vars")) & toolkit_keys()


def render(tmp_path: Path, site: Path, collections: Path) -> dict[str, object]:
    playbook, out = tmp_path / "render.yml", tmp_path / "out.json"
    playbook.write_text(PLAY)
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text(f"[defaults]\ncollections_path = {collections}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(cfg), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", str(site), str(playbook), "-e", f"out={out}", "-c", "local"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return json.loads(out.read_text())


def toolkit_copy(tmp_path: Path, cuda: str) -> Path:
    """A copy of the collection's roles and plugins as an update would ship them, with another CUDA pin."""
    root = tmp_path / "collections" / "ansible_collections" / "sm120" / "sglang"
    for part in ("roles", "plugins", "meta"):
        shutil.copytree(ROOT / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "galaxy.yml", root)
    stack = root / "roles/toolkit_defaults/defaults/main/stack.yml"
    text = stack.read_text()
    pinned = yaml.safe_load(text)["stack_cuda_version"]
    assert f'stack_cuda_version: "{pinned}"' in text
    stack.write_text(text.replace(f'stack_cuda_version: "{pinned}"', f'stack_cuda_version: "{cuda}"'))
    return tmp_path / "collections"


def test_a_toolkit_update_reaches_the_site_and_the_sites_override_wins(tmp_path: Path) -> None:
    site = tmp_path / "site"
    shutil.copytree(SITE, site)
    shipped = yaml.safe_load((DEFAULTS / "stack.yml").read_text())
    first = render(tmp_path, site, ROOT / ".collections")
    assert first["cuda"] == shipped["stack_cuda_version"] and first["sglang"] == shipped["stack_sglang_version"]
    assert first["build_root"] == f"{first['root']}/build" and first["user"] == "deploy"
    # the toolkit is updated (another pin ships): the site, which did not set it, follows
    updated = render(tmp_path, site, toolkit_copy(tmp_path / "update", "13.9.9"))
    assert updated["cuda"] == "13.9.9"
    # the site sets its own values in its own files: they win over the toolkit's defaults, nothing of the toolkit edited
    (site / "group_vars/all/site.yml").write_text('---\nstack_sglang_version: "0.5.23"\nsglang_root: /srv/sglang\n')
    (site / "host_vars/gpu-01/main.yml").write_text((site / "host_vars/gpu-01/main.yml").read_text() + 'stack_cuda_version: "13.0.2"\n')
    overridden = render(tmp_path, site, toolkit_copy(tmp_path / "update2", "13.9.9"))
    assert overridden["sglang"] == "0.5.23" and overridden["cuda"] == "13.0.2"
    assert overridden["build_root"] == "/srv/sglang/build", "the toolkit's wiring follows the site's sglang_root"
    assert yaml.safe_load((DEFAULTS / "stack.yml").read_text()) == shipped


ORPHANS_PLAY = """
- name: Check the inventory's entries
  hosts: all
  gather_facts: false
  tasks:
    - name: Run preflight's inventory check
      ansible.builtin.include_role:
        name: sm120.sglang.preflight
        tasks_from: inventory
"""


def test_host_vars_and_group_vars_that_name_nothing_are_reported_or_refused(tmp_path: Path) -> None:
    """A host renamed in hosts.yml leaves its host_vars behind (the SSH user, the listen address, the key): preflight
    names the entries that apply to nothing, as a warning, or refuses with preflight_orphan_inventory_entries: refuse."""
    inv = tmp_path / "site"
    for path, text in {
        "hosts.yml": "all:\n  children:\n    gpu_hosts:\n      hosts:\n        gpu-02:\n          ansible_connection: local\n",
        "host_vars/gpu-01/main.yml": "ansible_user: deploy\n",
        "host_vars/gpu-02.yml": "sglang_service_host: 127.0.0.1\n",
        "group_vars/gpu_hosts/main.yml": "sglang_root: /opt/sglang\n",
        "group_vars/old_hosts.yml": "sglang_root: /srv/sglang\n",
    }.items():
        (inv / path).parent.mkdir(parents=True, exist_ok=True)
        (inv / path).write_text(text)
    (tmp_path / "play.yml").write_text(ORPHANS_PLAY)
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        argv = [str(ANSIBLE_PLAYBOOK), "-i", str(inv / "hosts.yml"), str(tmp_path / "play.yml"), *extra]
        return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False)

    warned = run()
    assert warned.returncode == 0, warned.stdout + warned.stderr
    said = " ".join(warned.stdout.split())
    assert f"WARNING: {inv}: host_vars/gpu-01, group_vars/old_hosts name(s) no host or group of this inventory" in said, said
    refused = run("-e", "preflight_orphan_inventory_entries=refuse")
    assert refused.returncode == 2 and "host_vars/gpu-01, group_vars/old_hosts" in " ".join(refused.stdout.split())
    shutil.rmtree(inv / "host_vars" / "gpu-01")
    (inv / "group_vars" / "old_hosts.yml").unlink()
    clean = run("-e", "preflight_orphan_inventory_entries=refuse")
    assert clean.returncode == 0 and "name(s) no host or group" not in clean.stdout, clean.stdout
