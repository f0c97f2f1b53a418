"""Shared fixtures: the controller's real CUDA toolkit, the stack's values, the stand-in server (the toolkit's package root,
plugins/module_utils and plugins/plugin_utils, is installed editable in the controller venv: scripts/venv.sh)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from sglang_sm120.release import lock as deploy_lock
from sglang_sm120.serve import bench_client

ROOT = Path(__file__).resolve().parent.parent

DATA = Path(__file__).resolve().parent / "data"

# The toolkit's command-line tools: console scripts of pyproject.toml, installed into the venv by `make venv`.
BIN = Path(sys.executable).parent


def stack_value(name: str) -> object:
    import yaml

    stack = yaml.safe_load((ROOT / "roles/toolkit_defaults/defaults/main/stack.yml").read_text())
    return stack[name]


def needed(path: Path, what: str, how: str) -> Path:
    """`path`, when it exists; otherwise the test fails: no WHAT at PATH: run HOW first."""
    if not path.exists():
        pytest.fail(f"no {what} at {path}: run {how} first")
    return path


@pytest.fixture(scope="session")
def cuda_home() -> Path:
    """The real CUDA toolkit that `make wheelhouse` lays out from NVIDIA's wheels."""
    cache = Path(os.environ.get("SGLANG_TOOLKIT_CACHE", ROOT / ".cache"))
    home = cache / f"cuda-toolkit-{stack_value('stack_cuda_version')}" / "toolkit"
    if not (home / "bin" / "nvcc").exists():
        pytest.fail(f"no controller toolkit at {home}: run `make wheelhouse` first")
    return home


@pytest.fixture(scope="session")
def cuobjdump() -> Path:
    """NVIDIA's cuobjdump 13.2 (from its wheel), the independent witness for sm targets."""
    cache = Path(os.environ.get("SGLANG_TOOLKIT_CACHE", ROOT / ".cache"))
    return needed(cache / "test-tools" / "nvidia" / "cu13" / "bin" / "cuobjdump", "cuobjdump", "`make wheelhouse`")


CACHE = Path(os.environ.get("SGLANG_TOOLKIT_CACHE", ROOT / ".cache"))


def unpacked_sglang(version: str) -> Path:
    """The directory holding the real SGLang `version`'s unpacked package (`make sglang-wheels`)."""
    path = CACHE / "sglang" / version
    if not (path / "sglang").is_dir():
        pytest.fail(f"no unpacked SGLang {version} at {path}: run `make sglang-wheels` first")
    return path


@pytest.fixture(scope="session")
def promtool() -> Path:
    """Debian's real promtool (`make promtool` unpacks it: scripts/monitoring-debs.sh)."""
    return needed(CACHE / "promtool/bin/promtool", "promtool", "`make promtool` (scripts/monitoring-debs.sh)")


@pytest.fixture(scope="session")
def sglang_runtime_python() -> Path:
    """The Python of the real SGLang 0.5.9 runtime environment (`make sglang-runtime`): SGLang's own
    dependencies on a CPU. Put an SGLang tree first on PYTHONPATH to import that tree's code."""
    python = CACHE / "sglang-runtime" / "0.5.9" / "venv" / "bin" / "python"
    if not (CACHE / "sglang-runtime" / "0.5.9" / ".stamp").exists():
        pytest.fail(f"no SGLang runtime environment at {python.parent.parent}: run `make sglang-runtime` first")
    return python


@pytest.fixture(scope="session")
def sglang_tree() -> Path:
    """The pristine, unpacked real SGLang 0.5.9 wheel (`make sglang-wheels`)."""
    tree = CACHE / "sglang" / "0.5.9"
    if not (tree / "sglang").is_dir():
        pytest.fail(f"no unpacked SGLang 0.5.9 at {tree}: run `make sglang-wheels` first")
    return tree


def rehearsal_script() -> object:
    """scripts/rehearsal.py as a module (it is a script, not on the import path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("rehearsal_script", ROOT / "scripts/rehearsal.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def rendered() -> dict:
    """The production build specs and stack as the rehearsal renders them (tests/unit/controller/test_rehearsal.py,
    test_upstream_reference.py)."""
    return rehearsal_script().render(ROOT / "inventory/example-site")  # type: ignore[attr-defined]


@pytest.fixture()
def specs(rendered: dict) -> list:
    """A copy of the rendered specs a test may break."""
    import copy

    return copy.deepcopy(rendered["specs"])


def by_name(specs: list, name: str) -> dict:
    return next(s for s in specs if s["name"] == name)


UPSTREAM_INDEX = DATA / "upstream" / "index.yml"


def upstream_reference() -> tuple[dict, dict, Any]:
    """The upstream build facts (tests/data/upstream-build-facts.yml), and the upstream reference index as
    parsed and as load_reference types it (tests/unit/controller/test_rehearsal.py, test_upstream_reference.py); new objects
    at each call."""
    import yaml

    from sglang_sm120_controller.rehearsal.upstream import load_reference

    facts = yaml.safe_load((DATA / "upstream-build-facts.yml").read_text())
    index = yaml.safe_load(UPSTREAM_INDEX.read_text())
    return facts, index, load_reference(UPSTREAM_INDEX, index)


def dead_run(lock: str, bound: float) -> tuple[dict, int]:
    """`lock` taken (heartbeat bound `bound` minutes) by a deploy run of this controller whose process is then
    gone (a `sleep`, killed and reaped): the dead run's holder record and its pid, which no longer exists."""
    proc = subprocess.Popen(["sleep", "60"])
    dead = deploy_lock.run_holder(playbook="deploy", pid=proc.pid)
    assert deploy_lock.acquire(lock, dead, bound)["acquired"]
    proc.kill()
    proc.wait()
    return dead, proc.pid


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


STANDIN_ROOT = ROOT / "tests/fixtures/sglang-standin"


def standin_env(version: str, load: float, warmup: float, health: float, token_ms: int) -> dict[str, str]:
    """The stand-in server's timing settings (SGLANG_STANDIN_*, tests/fixtures/sglang-standin): the SGLang
    version it speaks as, seconds of model load (port closed) and of warm-up (503), /health's latency,
    milliseconds a token."""
    values = {"VERSION": version, "LOAD_SECONDS": load, "WARMUP_SECONDS": warmup, "HEALTH_SECONDS": health, "TOKEN_MS": token_ms}
    return {f"SGLANG_STANDIN_{name}": str(value) for name, value in values.items()}


@contextlib.contextmanager
def standin_server(flags: Sequence[str], env: Mapping[str, str], wait_s: float = 60.0) -> Iterator[str]:
    """The stand-in server (TEST FIXTURE, tests/fixtures/sglang-standin) on a free 127.0.0.1 port with
    the given flags and SGLANG_STANDIN_* settings; yields its URL once /health answers 200, or after
    wait_s (the caller asserts what it needs); stopped afterwards."""
    port = free_port()
    argv = [sys.executable, "-m", "sglang_standin", "--host", "127.0.0.1", "--port", str(port), *flags]
    proc = subprocess.Popen(argv, env={**os.environ, **env, "PYTHONPATH": str(STANDIN_ROOT)}, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + wait_s
    while bench_client._get(url, "/health", None) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
