#!/usr/bin/env python3
"""Print one value of the stack (roles/toolkit_defaults/defaults/main/stack.yml).

scripts/stack_var.py stack_cuda_version        -> 13.0.1
scripts/stack_var.py stack_cuda_wheel_specs    -> one item a line
scripts/stack_var.py stack_sglang_version      -> 0.5.9

Only values written out in stack.yml: the ones Ansible derives (stack_torch_version and the rest of
the Python stack follow stack_sglang_version through the lookup sglang_release_stack) are refused
with the command that renders them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

STACK = Path(__file__).resolve().parent.parent / "roles/toolkit_defaults/defaults/main/stack.yml"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: stack_var.py NAME", file=sys.stderr)
        return 2
    stack = yaml.safe_load(STACK.read_text(encoding="utf-8"))
    if argv[1] not in stack:
        print(f"stack_var.py: {argv[1]} is not set in {STACK}", file=sys.stderr)
        return 2
    value = stack[argv[1]]
    if "{{" in str(value):
        print(
            f"stack_var.py: {argv[1]} is derived by Ansible ({value}); render it with a play that lists the role "
            "sm120.sglang.toolkit_defaults (docs/reference.md)",
            file=sys.stderr,
        )
        return 2
    for item in value if isinstance(value, list) else [value]:
        print(item)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
