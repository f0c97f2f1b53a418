"""The toolkit's own data files read on the controller with PyYAML (never on a host): the start-failure
catalogue and the release role's closure allowlist."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import yaml

from sglang_sm120.build.elf_closure import ALLOWLIST_VARIABLE
from sglang_sm120.launch.start_failures import CatalogueError, Entry, parse_catalogue

from .paths import CATALOGUE, RELEASE_DEFAULTS


def load_catalogue(path: str | Path = CATALOGUE) -> list[Entry]:
    """The catalogue's entries; CatalogueError naming the file when it cannot be read or parsed."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CatalogueError(f"{path}: cannot read the catalogue: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise CatalogueError(f"{path}: not YAML: {exc}") from exc
    return parse_catalogue(data, str(path))


def role_allowlist(defaults: Optional[Path] = None) -> dict[str, str]:
    """Role sglang_release's default sglang_release_closure_allowlist, for the rehearsal and the proofs."""
    path = defaults or RELEASE_DEFAULTS
    return dict(yaml.safe_load(path.read_text(encoding="utf-8"))[ALLOWLIST_VARIABLE] or {})
