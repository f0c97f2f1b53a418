"""The commands README.md, docs/ and the roles' READMEs give cannot drift from the tree (issue 49, item 3): every
command in a fenced block that calls the toolkit's tools runs them from the controller venv (`.venv/bin/`), names the
operator's site inventory (never the toolkit's own example host, inventory/production), a playbook that exists and
passes `--syntax-check`, a make target the Makefile has, a console script that answers `--help`."""

from __future__ import annotations

import re
import shlex
import subprocess

import pytest
import tomllib

from conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "roles").glob("*/README.md"))]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
TOOL = re.compile(r"^(?:\w+=\S+ )*(\.venv/bin/\S+|ansible-\w+|make|bin/\S+)\b")
VENV = ROOT / ".venv" / "bin"
# Commands that run in an operator's own project, where the toolkit is the installed collection and their own
# ansible-galaxy does the work (README "Use it from your own playbooks"): the one place a bare tool is right.
OWN_PROJECT = ("ansible-galaxy collection install /path/to/sm120-sglang-",)


def commands() -> list[tuple[str, str]]:
    """(where, command) for every line of a fenced block that calls a tool, continuation lines joined, `$ ` and
    trailing comments dropped."""
    found = []
    for doc in DOCS:
        for block in FENCE.findall(doc.read_text(encoding="utf-8")):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                line = line.strip().removeprefix("$ ")
                line = re.split(r"\s+#\s", line, maxsplit=1)[0].strip()
                if TOOL.match(line):
                    found.append((str(doc.relative_to(ROOT)), line))
    return found


COMMANDS = commands()


def tool_of(command: str) -> str:
    match = TOOL.match(command)
    assert match
    return match.group(1)


def test_the_docs_give_the_commands_an_operator_runs() -> None:
    tools = {tool_of(c) for _, c in COMMANDS}
    assert {".venv/bin/ansible-playbook", "make", ".venv/bin/sglang-compat"} <= tools, tools
    playbooks = {p for _, c in COMMANDS for p in re.findall(r"playbooks/[\w-]+\.yml", c)}
    # the day-2 playbooks are documented with their commands
    assert {"playbooks/status.yml", "playbooks/service.yml", "playbooks/uninstall.yml", "playbooks/rollback.yml"} <= playbooks


@pytest.mark.parametrize(("where", "command"), COMMANDS, ids=[f"{w}: {c[:60]}" for w, c in COMMANDS])
def test_each_command_runs_from_the_venv_on_the_operators_inventory(where: str, command: str) -> None:
    tool = tool_of(command)
    if tool.startswith("ansible-") and not command.startswith(OWN_PROJECT):
        pytest.fail(f"{where}: `{command}` calls {tool} outside the controller venv: write .venv/bin/{tool} (make venv puts it there)")
    assert "inventory/production" not in command, f"{where}: `{command}` names the toolkit's example host; use inventory/site"
    for inventory in re.findall(r"(?:(?:^|\s)(?:-i|--inventory)[= ]\s*|\bINVENTORY=)(\S+)", command):
        assert inventory in ("inventory/site", "inventory/lab"), f"{where}: `{command}`: -i {inventory}, expected inventory/site"
    for playbook in re.findall(r"playbooks/[\w-]+\.yml", command):
        assert (ROOT / playbook).is_file(), f"{where}: `{command}`: no {playbook}"
    if tool == "make":
        target = shlex.split(command)[1]
        assert re.search(rf"^{re.escape(target)}:", (ROOT / "Makefile").read_text(), re.M), f"{where}: `{command}`: no make target {target}"
    elif tool.startswith(".venv/bin/"):
        name = tool.removeprefix(".venv/bin/")
        scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
        assert name in scripts or name in ("python", "ansible-playbook", "ansible-vault", "ansible-galaxy", "ansible-doc"), (
            f"{where}: `{command}`: {name} is not a console script of pyproject.toml nor a tool of the venv"
        )


def test_every_documented_playbook_passes_syntax_check() -> None:
    """One ansible-playbook run over every playbook the docs name, against the operator's inventory as shipped."""
    playbooks = sorted({p for _, c in COMMANDS for p in re.findall(r"playbooks/[\w-]+\.yml", c)})
    proc = subprocess.run(
        [str(VENV / "ansible-playbook"), "-i", "inventory/example-site", "--syntax-check", *playbooks],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_every_documented_console_script_answers_help() -> None:
    names = sorted({tool_of(c).removeprefix(".venv/bin/") for _, c in COMMANDS if tool_of(c).startswith(".venv/bin/sglang-")})
    assert names, "no console script documented"
    for name in names:
        proc = subprocess.run([str(VENV / name), "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and "usage:" in proc.stdout.lower(), f"{name} --help: {proc.stdout[-500:]}{proc.stderr[-500:]}"


def test_the_check_catches_a_drifted_command() -> None:
    """Not vacuous: a bare tool, the example host's inventory and a playbook that is gone are each caught."""
    for bad in (
        "ansible-vault encrypt x.yml",
        ".venv/bin/ansible-playbook -i inventory/production playbooks/site.yml",
        ".venv/bin/ansible-playbook -i inventory/site playbooks/gone.yml",
        "make nothing-such",
    ):
        with pytest.raises((AssertionError, pytest.fail.Exception)):
            test_each_command_runs_from_the_venv_on_the_operators_inventory("x.md", bad)
