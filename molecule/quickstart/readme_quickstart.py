#!/usr/bin/env python3
"""Run README.md's "Production quick start" as written, against this scenario's test host.

The README marks each block an operator runs with `<!-- quickstart:run -->` right above a ```sh
fence. This script runs those blocks, in order, with bash, in a copy of the repository (the files
git knows, as a fresh clone has them; the controller venv and caches linked in), under an empty
HOME and without molecule's or Ansible's environment, as an operator's shell would be. What the
README asks the operator to do by hand between the blocks (step 2: say where the host is) is done
here, and only that:

- `ansible_host: 192.0.2.10` (the documentation address) in inventory/site/hosts.yml becomes 127.0.0.1, and in the
  commands `192.0.2.10:30000` becomes the port the test host's 30000 is published on;
- host_vars/gpu-01/test-host.yml says how this host is reached (the published SSH port, the
  scenario's key and known_hosts) and turns the GPU checks off as the lab does (the lab's
  group_vars, less the model configs: this host holds the model directories themselves); the
  stand-in server "loads" for STANDIN_LOAD_SECONDS, so that the canary's and the start's waits
  take more than one poll and print their progress lines as a real load's do.

A command line ending in `# prints TEXT` must print TEXT. The run fails at the first failing
command, naming the block and its line; its output is printed as it comes and kept in
<work>/output.log. At the end, what the operator saw must hold what the README promises of it
(`operator_view`): the plan of `--check`, progress lines and no `FAILED - RETRYING`.

  readme_quickstart.py --repo DIR --ssh-port N --http-port N --ssh-dir DIR [--work DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

MARK = "<!-- quickstart:run -->"
DOC_ADDRESS = "192.0.2.10"
EXPECT = re.compile(r"^(?P<command>.*?)\s+# prints (?P<text>.+)$")


class QuickstartError(Exception):
    pass


def section(readme: str) -> str:
    """The text of the README's "Production quick start" section."""
    match = re.search(r"^## Production quick start\n(.*?)(?=^## )", readme, re.S | re.M)
    if not match:
        raise QuickstartError('README.md has no "## Production quick start" section')
    return match.group(1)


def blocks(readme: str) -> list[str]:
    """The shell blocks of the quick start an operator runs, in order."""
    found = re.findall(rf"{re.escape(MARK)}\n```sh\n(.*?)```", section(readme), re.S)
    if len(found) != section(readme).count(MARK):
        raise QuickstartError(f"every {MARK} in the quick start must be followed by a ```sh block")
    if not found:
        raise QuickstartError(f"the quick start marks no block with {MARK}")
    return found


def script(block: str, http_port: int, state: Path) -> str:
    """The block as bash runs it: the host's address for this test host, `# prints` checked, and
    what earlier blocks exported (an operator runs them in one terminal) exported again."""
    lines = ["set -euo pipefail", f"[ ! -f {state} ] || . {state}", f"trap 'export -p > {state}' EXIT"]
    # A command continued over several lines (a trailing backslash) is one line here.
    for line in block.replace("\\\n", " ").splitlines():
        line = line.replace(f"{DOC_ADDRESS}:30000", f"127.0.0.1:{http_port}")
        lines.append(f"printf '+ %s\\n' {shlex_quote(line)}")
        expect = EXPECT.match(line)
        if expect:
            text = expect.group("text").strip()
            lines.append(f"quickstart_out=$({expect.group('command')})")
            lines.append('printf "%s\\n" "$quickstart_out"')
            lines.append(
                f'grep -qF -- {shlex_quote(text)} <<<"$quickstart_out" || '
                f"{{ echo 'quickstart: expected the output to contain {text}' >&2; exit 1; }}"
            )
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"


def shlex_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def copy_tree(repo: Path, work: Path) -> Path:
    """The repository's files as a fresh clone has them (plus uncommitted ones git does not
    ignore), modification times kept so `make venv` sees the linked venv as current."""
    listed = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    tree = work / "sglang-sm120"
    for raw in filter(None, listed):
        name = raw.decode()
        source = repo / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the working tree
        target = tree / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)
    for linked in (".venv", ".cache"):
        (tree / linked).symlink_to(repo / linked)
    return tree


def operator_edits(tree: Path, ssh_port: int, ssh_dir: Path) -> None:
    """Step 2 of the quick start, for this test host."""
    hosts = tree / "inventory/site/hosts.yml"
    text = hosts.read_text()
    line = f"ansible_host: {DOC_ADDRESS}"
    if text.count(line) != 1:
        raise QuickstartError(f"{hosts}: expected '{line}' once (the host the operator puts in), found it {text.count(line)} times")
    hosts.write_text(text.replace(line, "ansible_host: 127.0.0.1"))
    lab: dict = {}
    for name in ("lab.yml", "build.yml"):
        lab.update(yaml.safe_load((tree / "inventory/lab/group_vars/lab" / name).read_text()))
    lab.pop("sglang_launch_model_configs")
    lab["sglang_extra_env"] = {**lab.get("sglang_extra_env", {}), "SGLANG_STANDIN_LOAD_SECONDS": str(STANDIN_LOAD_SECONDS)}
    lab["sglang_start_timeout"] = START_TIMEOUT_SECONDS
    lab.update(
        ansible_port=ssh_port,
        ansible_ssh_private_key_file=str(ssh_dir / "id_ed25519"),
        ansible_ssh_common_args=f"-o UserKnownHostsFile={ssh_dir / 'known_hosts'} -o StrictHostKeyChecking=yes",
    )
    header = "# The quickstart scenario's test host: how it is reached, and the lab's GPU-off settings.\n"
    (tree / "inventory/site/host_vars/gpu-01/test-host.yml").write_text("---\n" + header + yaml.safe_dump(lab, sort_keys=True))


def operator_env(home: Path) -> dict[str, str]:
    """An operator's shell: no molecule, no Ansible settings, no venv on PATH, an empty HOME."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "MOLECULE_", "SGLANG_TOOLKIT_", "VIRTUAL_ENV", "PY_COLORS"))
    }
    env["PATH"] = ":".join(p for p in env.get("PATH", "").split(":") if not p.rstrip("/").endswith(("/.venv/bin", "/virtualenv/bin")))
    env["HOME"] = str(home)
    return env


def run_block(text: str, tree: Path, env: dict[str, str], log: Path) -> int:
    """Run one block with bash, printing its output as it comes and appending it to the log."""
    with (
        subprocess.Popen(["bash", "-c", text], cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc,
        log.open("ab") as out,
    ):
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.buffer.write(line)
            sys.stdout.flush()
            out.write(line)
    return proc.returncode


# TEST FIXTURE: seconds the stand-in keeps its port closed, "loading" (its default is 2); longer than a
# poll of the start's wait (the lab's 2 s), and with the rest of the start longer than the canary's (5 s).
STANDIN_LOAD_SECONDS = 4
# The lab's 30 s start timeout is for its 2-second stand-in; this one waits longer on a busy CI machine.
START_TIMEOUT_SECONDS = 120

# What an operator following the quick start is promised to see (README step 4, docs/progress.md).
PROMISED = {
    "the start gate's verdicts": re.compile(r"start gate: \d+ known start failures checked"),
    "the build plan with its estimates (--check)": re.compile(r"source builds: [0-9.]+-[0-9.]+ h \(estimates"),
    "the plan's summary line (--check)": re.compile(r"plan: \d+ artifact\(s\) to fetch or build"),
    "how long nothing would serve (--check)": re.compile(r"downtime: none \(nothing serves yet\)"),
    "the start canary's progress": re.compile(r"WAITING \[gpu-01\]: start canary of release \S+ \(policy \w+\): \d+:\d\d elapsed"),
    "the start's progress": re.compile(r"WAITING \[gpu-01\]: start of sglang\.service \(/health [^,]+, unit \w+\): \d+:\d\d elapsed"),
    "the benchmark's progress": re.compile(r"WAITING \[gpu-01\]: benchmark \w+ concurrency \d+ \(bench_serving\): \d+:\d\d elapsed"),
}


def operator_view(output: str) -> list[str]:
    """What the README promises the operator sees and the output lacks (empty: all there)."""
    missing = [f"{what} (/{pattern.pattern}/)" for what, pattern in PROMISED.items() if not pattern.search(output)]
    if "FAILED - RETRYING" in output:
        missing.append("no `FAILED - RETRYING` line (the toolkit's callback prints progress instead), found one")
    return missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True)
    parser.add_argument("--ssh-port", type=int, required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--ssh-dir", type=Path, required=True)
    parser.add_argument("--work", type=Path)
    args = parser.parse_args(argv)
    repo = args.repo.resolve()
    steps = blocks((repo / "README.md").read_text())
    work = args.work or Path(tempfile.mkdtemp(prefix="quickstart-"))
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    tree = copy_tree(repo, work)
    home = work / "home"
    home.mkdir()
    env = operator_env(home)
    edited = False
    for number, block in enumerate(steps, 1):
        print(f"quickstart: block {number} of {len(steps)}", flush=True)
        returncode = run_block(script(block, args.http_port, work / "exported"), tree, env, work / "output.log")
        if returncode != 0:
            raise QuickstartError(f"block {number} of the README's quick start failed (exit {returncode}):\n{block}")
        if not edited and (tree / "inventory/site/hosts.yml").exists():
            operator_edits(tree, args.ssh_port, args.ssh_dir.resolve())
            edited = True
    if not edited:
        raise QuickstartError("no block made inventory/site/hosts.yml, so step 2 could not be followed")
    reports = sorted((tree / "reports").glob("gpu-01/*/report.md"))
    if not reports:
        raise QuickstartError(f"the quick start ran but wrote no report under {tree / 'reports'}")
    missing = operator_view((work / "output.log").read_text(encoding="utf-8", errors="replace"))
    if missing:
        raise QuickstartError("the quick start's output lacks what the README promises:\n- " + "\n- ".join(missing))
    print(f"quickstart: done; report {reports[-1]}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except QuickstartError as exc:
        print(f"quickstart: {exc}", file=sys.stderr)
        sys.exit(1)
