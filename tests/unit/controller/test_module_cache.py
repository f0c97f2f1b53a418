"""The module cache across ansible-playbook runs (plugins/plugin_utils/sglang_sm120_controller/module_cache.py and
plugins/callback/module_cache.py): the fingerprint follows every module source, only collection and ansible
modules are kept, an unsafe store is refused; and with real ansible-playbook runs, a payload is reused while
its sources are unchanged and never after one of them changed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_sm120_controller import module_cache

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent


def _tree(tmp_path: Path) -> Path:
    collection = tmp_path / "roots" / "ansible_collections" / "tstns" / "tstcol"
    (collection / "plugins" / "modules").mkdir(parents=True)
    (collection / "plugins" / "module_utils").mkdir(parents=True)
    (collection / "plugins" / "module_utils" / "value.py").write_text("VALUE = 1\n")
    (collection / "plugins" / "modules" / "answer.py").write_text(
        "from ansible.module_utils.basic import AnsibleModule\n"
        "from ansible_collections.tstns.tstcol.plugins.module_utils.value import VALUE\n\n\n"
        "def main():\n"
        "    module = AnsibleModule(argument_spec={})\n"
        "    module.exit_json(changed=False, value=VALUE)\n\n\n"
        "if __name__ == '__main__':\n"
        "    main()\n"
    )
    return collection


def _ansible(tmp_path: Path) -> Path:
    ansible = tmp_path / "ansible"
    for sub in ("modules", "module_utils"):
        (ansible / sub).mkdir(parents=True)
        (ansible / sub / "x.py").write_text("X = 1\n")
    return ansible


def test_the_fingerprint_follows_every_module_source_and_nothing_else(tmp_path: Path) -> None:
    collection = _tree(tmp_path)
    ansible = _ansible(tmp_path)
    dirs = module_cache.module_source_dirs(ansible, [tmp_path / "roots", tmp_path / "nothing-here"])
    assert dirs == [
        ansible / "modules",
        ansible / "module_utils",
        collection / "plugins" / "modules",
        collection / "plugins" / "module_utils",
    ]
    first = module_cache.fingerprint(dirs, "2.19.14")
    assert module_cache.fingerprint(dirs, "2.19.14") == first
    assert module_cache.fingerprint(dirs, "2.19.15") != first, "another ansible-core builds other payloads"

    # bytecode and other files are not sources
    (collection / "plugins" / "module_utils" / "__pycache__").mkdir()
    (collection / "plugins" / "module_utils" / "__pycache__" / "value.cpython-311.pyc").write_bytes(b"x")
    (collection / "plugins" / "modules" / "README.md").write_text("notes\n")
    assert module_cache.fingerprint(dirs, "2.19.14") == first

    value = collection / "plugins" / "module_utils" / "value.py"
    value.write_text("VALUE = 2\n")  # same size: the modification time tells
    stamp = value.stat().st_mtime_ns + 1_000_000_000
    os.utime(value, ns=(stamp, stamp))
    edited = module_cache.fingerprint(dirs, "2.19.14")
    assert edited != first
    (collection / "plugins" / "module_utils" / "extra.py").write_text("")
    assert module_cache.fingerprint(dirs, "2.19.14") not in (first, edited)


def test_only_collection_and_ansible_payloads_go_back_and_forth(tmp_path: Path) -> None:
    run_cache, store = tmp_path / "run", tmp_path / "store"
    run_cache.mkdir()
    store.mkdir()
    names = {
        "ansible_collections.sm120.sglang.plugins.modules.sglang_files-ZIP_DEFLATED-none": True,
        "ansible.modules.user-ZIP_DEFLATED-none": True,
        "ansible.legacy.mine-ZIP_DEFLATED-none": False,  # a role's library/ module: not fingerprinted
        "ansible.modules.user-ZIP_DEFLATED-none.lock": False,
        "ansible.modules.copy-ZIP_DEFLATED-none-part": False,
    }
    for name in names:
        (run_cache / name).write_bytes(name.encode())
    saved = module_cache.save(run_cache, store)
    assert sorted(saved) == sorted(n for n, kept in names.items() if kept)
    assert module_cache.save(run_cache, store) == [], "what the store holds is not copied again"

    fresh = tmp_path / "next-run" / "ansiballz_cache"
    restored = module_cache.restore(store, fresh)
    assert sorted(restored) == sorted(saved)
    assert (fresh / "ansible.modules.user-ZIP_DEFLATED-none").read_bytes() == b"ansible.modules.user-ZIP_DEFLATED-none"
    assert not [p for p in fresh.iterdir() if p.name.endswith(".part")]
    assert module_cache.restore(store, fresh) == [], "a payload the run has is not overwritten"


def test_a_store_others_may_write_or_a_link_is_not_used(tmp_path: Path) -> None:
    base = tmp_path / "store"
    ok = module_cache.store_dir(base, "k1")
    assert ok == base / "k1" and oct(ok.stat().st_mode & 0o777) == oct(0o700)

    os.chmod(base, 0o770)
    with pytest.raises(module_cache.StoreError, match="writable by its group or others"):
        module_cache.store_dir(base, "k1")
    os.chmod(base, 0o700)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (base / "k2").symlink_to(elsewhere)
    with pytest.raises(module_cache.StoreError, match="is not a directory"):
        module_cache.store_dir(base, "k2")


def test_prune_keeps_the_newest_and_the_one_in_use(tmp_path: Path) -> None:
    base = tmp_path / "store"
    base.mkdir()
    for age, key in enumerate(["a", "b", "c", "d", "e", "f"]):
        (base / key).mkdir()
        os.utime(base / key, (1_000_000 - age * 100, 1_000_000 - age * 100))  # a newest, f oldest
    removed = module_cache.prune(base, keep_key="f", keep=3)
    assert sorted(removed) == ["c", "d", "e"]
    assert sorted(p.name for p in base.iterdir()) == ["a", "b", "f"]


def _playbook_run(project: Path, store: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(project / "ansible.cfg"), SGLANG_MODULE_CACHE=str(store), ANSIBLE_DEBUG="1", ANSIBLE_NOCOLOR="1")
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "site.yml"], cwd=project, env=env, capture_output=True, text=True, timeout=180, check=False
    )


def test_real_runs_reuse_a_payload_until_its_module_utils_change(tmp_path: Path) -> None:
    collection = _tree(tmp_path)
    project, store = tmp_path / "project", tmp_path / "module-cache"
    project.mkdir()
    (project / "ansible.cfg").write_text(
        "[defaults]\n"
        f"collections_path = {tmp_path / 'roots'}:{ROOT / '.collections'}\n"
        "callbacks_enabled = sm120.sglang.module_cache\n"
        "retry_files_enabled = False\n"
    )
    (project / "inventory.ini").write_text(f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    (project / "site.yml").write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - tstns.tstcol.answer:\n      register: answer\n"
        "    - ansible.builtin.debug:\n        msg: 'the answer is {{ answer.value }}'\n"
    )
    (project / "ansible.cfg").write_text((project / "ansible.cfg").read_text() + f"inventory = {project / 'inventory.ini'}\n")

    def answer(proc: subprocess.CompletedProcess[str]) -> str:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout.split('"msg": "the answer is ', 1)[1].split('"', 1)[0]

    payload = "ansible_collections.tstns.tstcol.plugins.modules.answer-"
    first = _playbook_run(project, store)
    assert answer(first) == "1"
    assert "ANSIBALLZ: Creating module" in first.stdout
    stored = [p for p in store.glob("*/*") if p.name.startswith(payload)]
    assert len(stored) == 1, sorted(p.name for p in store.glob("*/*"))

    second = _playbook_run(project, store)
    assert answer(second) == "1"
    assert "ANSIBALLZ: using cached module: " in second.stdout and "ANSIBALLZ: Creating module" not in second.stdout, (
        "an unchanged module is built again"
    )

    value = collection / "plugins" / "module_utils" / "value.py"
    value.write_text("VALUE = 2\n")
    stamp = value.stat().st_mtime_ns + 1_000_000_000
    os.utime(value, ns=(stamp, stamp))
    third = _playbook_run(project, store)
    assert answer(third) == "2", "a payload built from the old module_utils ran"
    assert "ANSIBALLZ: Creating module" in third.stdout
    assert len([p for p in store.glob("*/*") if p.name.startswith(payload)]) == 2, "one payload per fingerprint"
