"""The patch engine's exceptions, in a module of their own so its sibling modules share them without an import cycle."""

from __future__ import annotations

from ..errors import ToolkitError


class SglangPatchError(ToolkitError):
    """A patch operation was refused; the message carries what was expected and what was found."""


class UsageError(SglangPatchError):
    """The request itself is wrong: unknown patch id, unknown variable, badly typed value."""


class ManifestError(SglangPatchError):
    """The manifest is malformed."""


class UnsupportedVersionError(SglangPatchError):
    """The installed SGLang version is not one the patch was written for."""


class DriftError(SglangPatchError):
    """A target's bytes are neither pristine nor the recorded patched result."""


class HunkError(SglangPatchError):
    """A hunk of a rendered patch does not apply exactly."""


class StateError(SglangPatchError):
    """The state directory is inconsistent with the request or the files."""


class LintError(SglangPatchError):
    """A rendered patch adds a pyflakes message (undefined name, syntax error, ...) to its target."""
