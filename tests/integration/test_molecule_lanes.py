"""scripts/molecule-lanes.sh (make test's runner), with pytest and molecule replaced by scripts on PATH."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LANES = ROOT / "scripts" / "molecule-lanes.sh"


def shim(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def lanes(tmp_path: Path, *jobs: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "MOLECULE_LANES": "2"}
    return subprocess.run(["bash", str(LANES), *jobs], capture_output=True, text=True, env=env, timeout=120)


def test_a_failed_job_is_named_again_after_the_table_with_its_failures(tmp_path: Path) -> None:
    # A long log: only the tail survives in CI, so the failing test must be repeated at the end.
    noise = "".join(f"echo passed line {i}\n" for i in range(200))
    shim(
        tmp_path,
        "pytest",
        noise + "echo '=== short test summary info ==='\necho 'FAILED tests/test_x.py::test_y - assert 1 == 2'\nexit 1\n",
    )
    shim(
        tmp_path,
        "molecule",
        'echo "TASK [$3]"\n[ "$3" = bad ] && { echo "fatal: [h]: FAILED! => {\\"msg\\": \\"boom\\"}"; exit 2; }\necho done\n',
    )
    result = lanes(tmp_path, "good", "pytest", "bad")
    assert result.returncode == 1
    table, _, after = result.stdout.partition("molecule: job, exit status, seconds\n")
    assert "[good] done" in table and "passed line 199" in table
    rows = [line.split()[1:3] for line in after.splitlines() if line.startswith("molecule:   ")]
    assert sorted(rows) == [["bad", "2"], ["good", "0"], ["pytest", "1"]]
    assert "[pytest] FAILED tests/test_x.py::test_y - assert 1 == 2" in after
    assert "passed line" not in after  # only the summary, not the whole log
    assert '[bad] fatal: [h]: FAILED! => {"msg": "boom"}' in after
    assert "last lines of good" not in after


def test_all_green_prints_only_the_table(tmp_path: Path) -> None:
    shim(tmp_path, "pytest", "echo '1 passed'\n")
    shim(tmp_path, "molecule", "echo ok\n")
    result = lanes(tmp_path, "default", "pytest")
    assert result.returncode == 0
    after = result.stdout.partition("molecule: job, exit status, seconds\n")[2]
    assert sorted(line.split()[1:3] for line in after.splitlines()) == [["default", "0"], ["pytest", "0"]]
