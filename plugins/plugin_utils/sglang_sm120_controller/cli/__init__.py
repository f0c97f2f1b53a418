"""The command-line tools (console scripts of pyproject.toml: cuda-arch, gpu-check, sglang-audit, sglang-compat,
sglang-evidence, sglang-flags, sglang-patch), each a main(argv) -> exit code and run() for the console script."""

from __future__ import annotations

import argparse
from typing import Optional

from sglang_sm120.errors import ToolkitError


class Usage(ToolkitError):
    """Bad usage of a tool: its message, exit 2."""


class Parser(argparse.ArgumentParser):
    """argparse that raises Usage instead of exiting, so each tool says the error its own way."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise Usage(message)


def split_flags(argv: list[str]) -> tuple[list[str], Optional[list[str]]]:
    """The tool's own arguments and the launch flags after `--` (None when there is no `--`)."""
    if "--" not in argv:
        return argv, None
    split = argv.index("--")
    return argv[:split], argv[split + 1 :]
