"""The toolkit's one exception base, and the one path from a module's work to ``fail_json``.

Standard library only (no Ansible import): ``run_module`` takes the AnsibleModule object.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Optional


class ToolkitError(Exception):
    """The base of every error the toolkit raises on purpose. The message says what was expected,
    what was found and what to do; ``result`` holds the fields a module's failure returns beside
    ``msg`` (``str(exc)`` is the message alone)."""

    def __init__(self, msg: str = "", **result: Any) -> None:
        super().__init__(msg)
        self.result = result


def run_module(module: Any, work: Callable[[], Mapping[str, Any]], partial: Optional[Mapping[str, Any]] = None) -> None:
    """Run a module's ``work()`` and end the module with what it returned (``module.exit_json``).

    A ToolkitError ends it with ``module.fail_json(msg=str(exc), **fields)``, fields being
    ``partial`` and then the error's own ``result``; an OSError (a file or process the module
    touched) with ``fail_json(msg=str(exc), **partial)``. ``partial``: the fields every failure
    returns besides, e.g. the result the work fills in as it goes (read when the error is caught)."""
    try:
        result = work()
    except ToolkitError as exc:
        module.fail_json(msg=str(exc), **{**(partial or {}), **exc.result})
    except OSError as exc:
        module.fail_json(msg=str(exc), **(partial or {}))
    else:
        module.exit_json(**result)
