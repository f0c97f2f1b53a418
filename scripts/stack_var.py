#!/usr/bin/env python3
"""Print one value of the stack (inventory/production/group_vars/all/stack.yml).

scripts/stack_var.py stack_cuda_version        -> 13.0.1
scripts/stack_var.py stack_cuda_wheel_specs    -> one item a line
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

STACK = Path(__file__).resolve().parent.parent / "inventory/production/group_vars/all/stack.yml"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: stack_var.py NAME", file=sys.stderr)
        return 2
    stack = yaml.safe_load(STACK.read_text(encoding="utf-8"))
    if argv[1] not in stack:
        print(f"stack_var.py: {argv[1]} is not set in {STACK}", file=sys.stderr)
        return 2
    value = stack[argv[1]]
    for item in value if isinstance(value, list) else [value]:
        print(item)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
