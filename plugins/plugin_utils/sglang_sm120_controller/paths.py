"""Where the collection's own files are, named once for the controller's Python (the command-line tools,
the lookups, the rehearsal). The package sits at <collection>/plugins/plugin_utils/sglang_sm120_controller,
so the collection is three levels up: the checkout (installed editable by `make venv`) or an installed
collection's directory (installed with `pip install` of that directory, editable too)."""

from __future__ import annotations

import os
from pathlib import Path

COLLECTION = Path(__file__).resolve().parents[3]
# A checkout has galaxy.yml, an installed collection MANIFEST.json; anything else is a copy of the package
# outside its collection (a non-editable install), whose data paths would all be missing.
if not any((COLLECTION / marker).is_file() for marker in ("galaxy.yml", "MANIFEST.json")):
    raise ImportError(
        f"sglang_sm120_controller is installed at {Path(__file__).resolve().parent}, outside its collection (neither "
        f"galaxy.yml nor MANIFEST.json at {COLLECTION}): install it editable from the collection's directory, "
        '`pip install -e <collection>` (README, "Use it from your own playbooks")'
    )
ROLES = COLLECTION / "roles"
# The toolkit's shipped settings (the defaults role, kubespray's way): stack pins, build specs, profiles.
DEFAULTS = ROLES / "toolkit_defaults" / "defaults" / "main"
# Each data file belongs to the role that reads it.
CATALOGUE = ROLES / "sglang_launch" / "files" / "start-failures.yml"
PATCHES = ROLES / "sglang_patches" / "files" / "patches"
MANIFEST = PATCHES / "manifest.yml"
TOKENIZER = ROLES / "sglang_canary" / "files" / "tokenizer"
PROMPTS = ROLES / "sglang_benchmark" / "files" / "prompts.json"
RELEASE_DEFAULTS = ROLES / "sglang_release" / "defaults" / "main.yml"
# The locks of each SGLang release's Python closure (scripts/lock_release.py writes them, build.yml's sglang spec reads them).
LOCKS = ROLES / "toolkit_defaults" / "files" / "locks"
# Downloads and scratch on the controller: $SGLANG_TOOLKIT_CACHE (the Makefile sets it), else .cache here.
CACHE = Path(os.environ.get("SGLANG_TOOLKIT_CACHE") or COLLECTION / ".cache")
BENCH_CLIENT = COLLECTION / "plugins" / "module_utils" / "sglang_sm120" / "serve" / "bench_client.py"


def named() -> dict[str, Path]:
    """The files a role may ask for by name (lookup sm120.sglang.sglang_toolkit_path)."""
    return {
        "manifest": MANIFEST,
        "patches": PATCHES,
        "catalogue": CATALOGUE,
        "bench_client": BENCH_CLIENT,
        "tokenizer": TOKENIZER,
        "prompts": PROMPTS,
        "cache": CACHE,
        "locks": LOCKS,
    }
