"""The collection as an operator uses it, outside this repository: `ansible-galaxy collection build` of the
checkout, `ansible-galaxy collection install` of the tarball into a temporary collections path, and a project of
the operator's own (an ansible.cfg whose collections_path is that path only, an inventory, a playbook naming
every role, module and lookup by its FQCN) run with ansible-playbook; then ansible-doc and ansible-test sanity on
the installed copy.

The collection's plugins (lookups, action plugins, the callback, the vars plugin) import the host package
`sglang_sm120` and the controller package `sglang_sm120_controller` as top-level packages. An operator provides
them with `pip install -e <collections>/ansible_collections/sm120/sglang` (README, "Use it from your own
playbooks") into the Python that runs ansible-playbook. This test must not re-point the shared venv (where
`make venv` installed the checkout editable), so it does what that editable install does, for the Ansible
processes it starts: PYTHONPATH names the installed copy's plugins/module_utils and plugins/plugin_utils, which
Python searches before the venv's editable finder for the checkout. Without it the plugins would still import
(from the checkout), and lookup('sm120.sglang.sglang_toolkit_path', ...) would answer paths in the checkout.

ansible-test sanity runs with --local: the tests in SANITY_OFFLINE need no download; the others (SANITY_PYPI)
install pinned requirements into a virtual environment of their own, which ansible-test bootstraps with a pip
script from a host this machine cannot reach: a stand-in script takes pip from the interpreter's ensurepip, the
requirements come from PyPI, and the environments are kept in the controller's cache for the next run.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import tarfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from conftest import CACHE, ROOT

BIN = Path(sys.executable).parent
GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
FQCN = f"{GALAXY['namespace']}.{GALAXY['name']}"
PYTHON_XY = f"{sys.version_info.major}.{sys.version_info.minor}"

# What the tarball must carry, and the trees galaxy.yml's build_ignore keeps out of it.
SHIPPED = ("plugins/modules/sglang_preflight.py", "roles/toolkit_defaults/defaults/main/stack.yml")
# The development trees stay out; tests/sanity ships (ansible-test reads its ignore file from the collection).
KEPT_OUT = ("tests/unit", "tests/integration", "tests/data", "tests/fixtures", "tests/conftest.py", "molecule/", ".cache/", "scripts/")
# Build leftovers no collection ships (caches of the tools, setuptools' metadata of the editable install).
JUNK_PARTS = (".pytest_cache", ".ruff_cache", ".mypy_cache", "__pycache__")

# ansible-test sanity tests that run with --local and no download (version-neutral code-smell tests and
# compile), and pass on the installed copy.
SANITY_OFFLINE = (
    "action-plugin-docs",
    "compile",
    "empty-init",
    "ignores",
    "line-endings",
    "no-get-exception",
    "no-illegal-filenames",
    "no-smart-quotes",
    "symlinks",
    "use-argspec-type-path",
    "use-compat-six",
    # what Ansible asks of a collection's Python; the exceptions, each with its reason, are tests/sanity/ignore-2.19.txt
    "no-assert",
    "replace-urlopen",
    "shebang",
)
# Each needs its own virtual environment with pinned requirements (ansible_test/_data/requirements/sanity.*.txt).
# Not "import": the controller plugins import the toolkit's Python (sglang_sm120_controller), which an operator
# pip-installs from the collection and ansible-test's isolated environment cannot have (the modules pass it).
SANITY_PYPI = ("ansible-doc", "pep8", "runtime-metadata", "yamllint", "validate-modules")

STEP_TIMEOUT = 120
RECAP = re.compile(
    r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)\s+"
    r"failed=(?P<failed>\d+)\s+skipped=(?P<skipped>\d+)\s+rescued=(?P<rescued>\d+)\s+ignored=(?P<ignored>\d+)",
    re.MULTILINE,
)

# ansible-test's pip bootstrap, in place of get-pip.py from ci-files.testing.ansible.com: pip from ensurepip (in a
# child process: ensurepip turns pip's configuration off in its own), then `pip install` of what it was asked for.
GET_PIP_STANDIN = """\
import subprocess
import sys

subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade"])
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", *args]))
"""


@dataclass(frozen=True)
class Collection:
    tarball: Path
    members: frozenset[str]  # the tarball's member names
    manifest: dict  # MANIFEST.json
    files: frozenset[str]  # FILES.json's names
    collections: Path  # the operator's collections path
    installed: Path  # <collections>/ansible_collections/sm120/sglang
    project: Path  # the operator's project: ansible.cfg, inventory, playbook
    work: Path  # where the playbook writes
    env: dict[str, str]


def run(argv: Sequence[str | Path], cwd: Path, env: dict[str, str], timeout: float = STEP_TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def member_json(tar: tarfile.TarFile, name: str) -> dict:
    member = tar.extractfile(name)
    assert member is not None, f"no {name} in {tar.name}"
    return json.loads(member.read())


def output(proc: subprocess.CompletedProcess[str]) -> str:
    return f"rc={proc.returncode}\n--- stdout\n{proc.stdout[-6000:]}\n--- stderr\n{proc.stderr[-4000:]}"


def operator_env(project: Path, installed: Path, home: Path) -> dict[str, str]:
    """The environment an operator's shell gives Ansible: nothing of this checkout's (no ANSIBLE_* setting, no
    SGLANG_TOOLKIT_CACHE, no PYTHONPATH of its own); the project's ansible.cfg; the packages of the installed copy."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_") and k not in ("PYTHONPATH", "SGLANG_TOOLKIT_CACHE")}
    env.update(
        ANSIBLE_CONFIG=str(project / "ansible.cfg"),
        ANSIBLE_HOME=str(home),
        ANSIBLE_NOCOLOR="1",
        # the module cache's store (callbacks_enabled above) beside ANSIBLE_HOME, not in this user's ~/.cache
        SGLANG_MODULE_CACHE=str(home / "module-cache"),
        PYTHONPATH=os.pathsep.join(str(installed / "plugins" / sub) for sub in ("module_utils", "plugin_utils")),
    )
    return env


def write_project(project: Path, collections: Path, work: Path) -> None:
    project.mkdir(parents=True)
    (project / "ansible.cfg").write_text(
        "[defaults]\n"
        f"collections_path = {collections}\n"
        f"inventory = {project / 'inventory.ini'}\n"
        "retry_files_enabled = False\n"
        # README's optional settings: the collection's stdout callback, module cache and vars plugin.
        "stdout_callback = sm120.sglang.sglang_progress\n"
        "callbacks_enabled = sm120.sglang.module_cache\n"
        "vars_plugins_enabled = sm120.sglang.sglang_vault_hint, host_group_vars\n"
    )
    (project / "inventory.ini").write_text(f"testhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    play = {
        "name": "Check this host and write files with the installed collection",
        "hosts": "testhost",
        "gather_facts": True,
        "roles": [
            {"role": f"{FQCN}.toolkit_defaults"},
            {
                "role": f"{FQCN}.preflight",
                "vars": {
                    "preflight_require_gpu": False,
                    "preflight_disks": [{"label": "scratch", "path": str(work / "scratch"), "min_gib": 0.001}],
                    "preflight_min_memory_gib": 0,
                    "preflight_max_python": "",
                    "preflight_host_facts_file": str(work / "out" / "host-facts.json"),
                },
            },
        ],
        "tasks": [
            {
                "name": "Write the operator's files with the collection's module",
                f"{FQCN}.sglang_files": {
                    "directories": [{"path": str(work / "out" / "files"), "mode": "0750"}],
                    "files": [
                        {"path": str(work / "out" / "files" / "greeting.txt"), "content": "written by sm120.sglang\n", "mode": "0640"},
                        {
                            "path": str(work / "out" / "files" / "manifest-path.txt"),
                            "content": "{{ lookup('" + FQCN + ".sglang_toolkit_path', 'manifest') }}\n",
                        },
                    ],
                },
            },
        ],
    }
    (project / "site.yml").write_text(yaml.safe_dump([play], sort_keys=False))


@pytest.fixture(scope="module")
def collection(tmp_path_factory: pytest.TempPathFactory) -> Collection:
    base = tmp_path_factory.mktemp("collection")
    collections = base / "collections"
    installed = collections / "ansible_collections" / GALAXY["namespace"] / GALAXY["name"]
    project = base / "project"
    work = base / "work"
    write_project(project, collections, work)
    env = operator_env(project, installed, base / "ansible-home")

    dist = base / "dist"
    built = run([BIN / "ansible-galaxy", "collection", "build", "--output-path", dist, ROOT], cwd=base, env=env)
    assert built.returncode == 0, output(built)
    tarball = dist / f"{GALAXY['namespace']}-{GALAXY['name']}-{GALAXY['version']}.tar.gz"
    assert tarball.is_file(), f"no {tarball.name} in {sorted(p.name for p in dist.iterdir())}\n{output(built)}"
    with tarfile.open(tarball) as tar:
        members = frozenset(m.name.removeprefix("./") for m in tar.getmembers())
        manifest = member_json(tar, "MANIFEST.json")
        files = frozenset(f["name"] for f in member_json(tar, "FILES.json")["files"])

    installs = run([BIN / "ansible-galaxy", "collection", "install", tarball, "-p", collections], cwd=project, env=env)
    assert installs.returncode == 0, output(installs)
    return Collection(tarball, members, manifest, files, collections, installed, project, work, env)


def test_the_tarball_ships_the_collection_and_keeps_the_development_trees_out(collection: Collection) -> None:
    info = collection.manifest["collection_info"]
    assert (info["namespace"], info["name"], info["version"]) == (GALAXY["namespace"], GALAXY["name"], GALAXY["version"])
    for path in SHIPPED:
        assert path in collection.files, f"FILES.json does not list {path}"
        assert path in collection.members, f"the tarball does not hold {path}"
    for names, what in ((collection.files, "FILES.json"), (collection.members, "the tarball")):
        leaked = sorted(n for n in names if n.startswith(KEPT_OUT) or n.rstrip("/") in {k.rstrip("/") for k in KEPT_OUT})
        assert not leaked, f"{what} holds what galaxy.yml's build_ignore should keep out: {leaked[:10]}"


def test_the_install_lands_in_the_operators_collections_path_only(collection: Collection) -> None:
    installed = json.loads((collection.installed / "MANIFEST.json").read_text())
    assert installed["collection_info"]["version"] == GALAXY["version"]
    for path in SHIPPED:
        assert (collection.installed / path).is_file()
    listed = run([BIN / "ansible-galaxy", "collection", "list", FQCN, "--format", "json"], cwd=collection.project, env=collection.env)
    assert listed.returncode == 0, output(listed)
    where = {path for path, found in json.loads(listed.stdout).items() if FQCN in found}
    assert where == {str(collection.collections / "ansible_collections")}, f"{FQCN} found at {where}"


def recap(stdout: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP's counts per host."""
    return {m["host"]: {k: int(v) for k, v in m.groupdict().items() if k != "host"} for m in RECAP.finditer(stdout)}


def test_an_operators_playbook_runs_the_installed_roles_modules_and_lookup(collection: Collection) -> None:
    playbook = [BIN / "ansible-playbook", "site.yml"]
    first = run([*playbook, "-vvv"], cwd=collection.project, env=collection.env, timeout=180)
    assert first.returncode == 0, output(first)
    counts = recap(first.stdout)
    assert set(counts) == {"testhost"}, output(first)
    # sglang_files wrote; preflight changes nothing (its facts file is a record, not a change).
    assert (counts["testhost"]["failed"], counts["testhost"]["changed"]) == (0, 1), counts

    # Every module and role task came from the installed copy, none from the checkout.
    modules = re.findall(r"^Using module file (\S+)", first.stdout, re.MULTILINE)
    ours = [m for m in modules if "/plugins/modules/" in m]  # a collection's, not ansible-core's ansible/modules/
    assert {Path(m).name for m in ours} == {"sglang_preflight.py", "sglang_files.py"}, modules
    assert all(Path(m).is_relative_to(collection.installed) for m in ours), ours
    task_paths = re.findall(r"^task path: (\S+?):\d+$", first.stdout, re.MULTILINE)
    role_tasks = [p for p in task_paths if "/roles/" in p]
    assert any("/roles/preflight/tasks/main.yml" in p for p in role_tasks), task_paths
    assert all(Path(p).is_relative_to(collection.installed) for p in role_tasks), role_tasks

    out = collection.work / "out"
    greeting = out / "files" / "greeting.txt"
    assert greeting.read_text() == "written by sm120.sglang\n"
    assert stat.S_IMODE(greeting.stat().st_mode) == 0o640
    assert stat.S_IMODE((out / "files").stat().st_mode) == 0o750
    manifest = Path((out / "files" / "manifest-path.txt").read_text().strip())
    assert manifest == collection.installed / "roles/sglang_patches/files/patches/manifest.yml"
    assert manifest.is_file()

    facts = json.loads((out / "host-facts.json").read_text())
    assert facts["gpus"] == []
    assert facts["memory_gib"] > 0
    assert "facts_unknown" in facts

    # The module cache (sm120.sglang.module_cache, enabled in the project's ansible.cfg) kept both modules' payloads.
    stored = sorted(p.name.split("-")[0] for p in Path(collection.env["SGLANG_MODULE_CACHE"]).glob("*/ansible_collections.*"))
    assert stored == [f"ansible_collections.{FQCN}.plugins.modules.{m}" for m in ("sglang_files", "sglang_preflight")], stored

    second = run(playbook, cwd=collection.project, env=collection.env, timeout=180)
    assert second.returncode == 0, output(second)
    again = recap(second.stdout)["testhost"]
    assert (again["failed"], again["changed"], again["ok"]) == (0, 0, counts["testhost"]["ok"]), output(second)


@pytest.mark.parametrize(
    ("kind", "name", "file"),
    [
        ("module", "sglang_preflight", "plugins/modules/sglang_preflight.py"),
        ("lookup", "sglang_toolkit_path", "plugins/lookup/sglang_toolkit_path.py"),
        ("callback", "module_cache", "plugins/callback/module_cache.py"),
    ],
)
def test_ansible_doc_reads_the_installed_copy(collection: Collection, kind: str, name: str, file: str) -> None:
    shown = run([BIN / "ansible-doc", "-t", kind, f"{FQCN}.{name}"], cwd=collection.project, env=collection.env)
    assert shown.returncode == 0, output(shown)
    header = shown.stdout.splitlines()[0]
    assert header == f"> {kind.upper()} {FQCN}.{name} ({collection.installed / file})", header
    assert str(ROOT) not in shown.stdout


def sanity(collection: Collection, tests: Iterable[str], home: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """ansible-test sanity on the installed copy (its cwd must be <...>/ansible_collections/<ns>/<name>); HOME is
    where ansible-test keeps its virtual environments."""
    env = {k: v for k, v in collection.env.items() if k != "PYTHONPATH"}
    env["HOME"] = str(home)
    argv = [BIN / "ansible-test", "sanity", "--local", "--python", PYTHON_XY, "--color", "no"]
    for test in tests:
        argv += ["--test", test]
    return run(argv, cwd=collection.installed, env=env, timeout=timeout)


def sanity_errors(proc: subprocess.CompletedProcess[str]) -> str:
    lines = (proc.stdout + proc.stderr).splitlines()
    return "\n".join(line for line in lines if line.startswith(("ERROR:", "FATAL:")))


def test_sanity_offline(collection: Collection, tmp_path: Path) -> None:
    proc = sanity(collection, SANITY_OFFLINE, tmp_path / "home", timeout=STEP_TIMEOUT)
    assert proc.returncode == 0, output(proc)
    ran = set(re.findall(r'^Running sanity test "([^"]+)"', proc.stdout + proc.stderr, re.MULTILINE))
    assert ran == set(SANITY_OFFLINE), ran


def test_sanity_with_pypi_requirements(collection: Collection) -> None:
    """The sanity tests with requirements of their own; ansible-test makes their virtual environments from PyPI once,
    kept in the controller's cache (a later run reuses them)."""
    home = CACHE / "ansible-test-home"
    cache = home / ".ansible" / "test" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "get_pip_24_2.py").write_text(GET_PIP_STANDIN)
    failed: dict[str, str] = {}
    for test in SANITY_PYPI:
        proc = sanity(collection, [test], home, timeout=550)
        if proc.returncode != 0:
            failed[test] = sanity_errors(proc) or output(proc)
    if failed:
        pytest.fail("\n\n".join(f"ansible-test sanity --test {t}:\n{e}" for t, e in failed.items()), pytrace=False)


def test_the_tarball_holds_no_build_leftovers(collection: Collection) -> None:
    """The tools' caches and the editable install's metadata stay out of the tarball: FILES.json checksums a file
    that a concurrent pytest or ruff rewrites before it is archived, and the install then fails (checksum mismatch)."""
    leftovers = sorted(
        name
        for name in collection.files
        if any(part in JUNK_PARTS or part.endswith(".egg-info") for part in name.split("/")) or name.endswith(".pyc")
    )
    assert not leftovers, (
        "galaxy.yml's build_ignore lets build leftovers into the tarball (add .pytest_cache, .ruff_cache, '*.egg-info'): "
        + ", ".join(leftovers[:12])
    )
