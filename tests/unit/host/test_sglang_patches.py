"""The SGLang patch engine against copies of the real 0.5.9 and 0.5.10 wheels (scripts/sglang-wheels.sh)."""

from __future__ import annotations

import ast
import json
import os
import py_compile
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import BIN, ROOT
from sglang_sm120.files import sha256_bytes
from sglang_sm120.patches.diff import apply_diff, parse_unified_diff
from sglang_sm120.patches.engine import apply, default_state_dir, pristine_sources, prove_rendered, render_selected, revert, status
from sglang_sm120.patches.errors import (
    DriftError,
    HunkError,
    LintError,
    ManifestError,
    SglangPatchError,
    StateError,
    UnsupportedVersionError,
    UsageError,
)
from sglang_sm120.patches.manifest import Manifest, load_manifest
from sglang_sm120.release.venv import SglangPackageError, find_sglang, sglang_version

PATCHES = ROOT / "roles/sglang_patches/files/patches"
OLD_SYMM_TEMPLATE = ROOT / "tests" / "data" / "patches" / "torch_symm_mem_sm120.old-mib.diff.j2"
CLI = BIN / "sglang-patch"
KIMI = "srt/models/kimi_k25.py"
SYMM = "srt/distributed/device_communicators/torch_symm_mem.py"
COMM = "srt/layers/communicator.py"
TARGETS = (KIMI, SYMM, COMM)
ALL_IDS = ["kimi_k25_eagle3_delegation", "torch_symm_mem_sm120", "flashinfer_allreduce_fusion_sm120"]


def wheel_dir(version: str) -> Path:
    cache = Path(os.environ.get("SGLANG_TOOLKIT_CACHE", ROOT / ".cache"))
    pkg = cache / "sglang" / version / "sglang"
    if not (pkg / "version.py").exists():
        pytest.fail(f"no unpacked SGLang {version} wheel at {pkg}: run scripts/sglang-wheels.sh first")
    return pkg


def copy_tree(version: str, dest: Path) -> Path:
    """version.py, _version.py and the patch targets of the real wheel, in dest/site-packages/sglang."""
    src = wheel_dir(version)
    pkg = dest / "site-packages" / "sglang"
    for rel in ("version.py", "_version.py", *TARGETS):
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / rel, pkg / rel)
    return pkg


@pytest.fixture
def sg9(tmp_path: Path) -> Path:
    return copy_tree("0.5.9", tmp_path / "v0.5.9")


@pytest.fixture
def sg10(tmp_path: Path) -> Path:
    return copy_tree("0.5.10", tmp_path / "v0.5.10")


@pytest.fixture(scope="module")
def manifest_data() -> dict[str, Any]:
    return yaml.safe_load((PATCHES / "manifest.yml").read_text())


@pytest.fixture
def manifest(manifest_data: dict[str, Any]) -> Manifest:
    return load_manifest(manifest_data, PATCHES)


def snapshot(pkg: Path) -> dict[str, bytes]:
    return {rel: (pkg / rel).read_bytes() for rel in TARGETS}


def state_files(pkg: Path) -> dict[str, bytes]:
    root = default_state_dir(pkg)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()} if root.exists() else {}


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CLI), *args], capture_output=True, text=True, check=False)


# ---------------------------------------------------------------- facts


def test_versions_read_without_import() -> None:
    assert sglang_version(wheel_dir("0.5.9")) == "0.5.9"
    assert sglang_version(wheel_dir("0.5.10")) == "0.5.10"


def test_manifest_pristine_hashes_match_the_wheels(manifest: Manifest) -> None:
    for spec in manifest.patches:
        for version, digest in spec.versions.items():
            assert sha256_bytes((wheel_dir(version) / spec.target).read_bytes()) == digest, (spec.id, version)


def test_defaults(manifest: Manifest) -> None:
    assert [s.id for s in manifest.patches if s.default] == ALL_IDS[:2]
    symm = manifest.get("torch_symm_mem_sm120")
    assert symm.variables["sm120_all_reduce_max_mib"].default == {2: 64, 4: 64, 8: 64}
    assert symm.variables["sm120_multimem_world_sizes"].default == []
    flashinfer = " ".join(manifest.get("flashinfer_allreduce_fusion_sm120").description.split())
    assert "no-op unless FlashInfer's comm JIT supports compute capability major 12 and the GPUs have P2P access" in flashinfer


def test_status_of_the_wheels(manifest: Manifest, sg9: Path, sg10: Path) -> None:
    assert {r.id: r.status for r in status(manifest, sg9)} == dict.fromkeys(ALL_IDS, "pristine")
    assert {r.id: r.status for r in status(manifest, sg10)} == {
        "kimi_k25_eagle3_delegation": "fixed-upstream",
        "torch_symm_mem_sm120": "pristine",
        "flashinfer_allreduce_fusion_sm120": "unsupported-version",
    }


# ---------------------------------------------------------------- apply / revert


def test_apply_reapply_revert(manifest: Manifest, sg9: Path) -> None:
    pristine = snapshot(sg9)
    results = apply(manifest, sg9, only=ALL_IDS)
    assert [(r.id, r.status, r.changed) for r in results] == [(i, "applied", True) for i in ALL_IDS]
    patched, state = snapshot(sg9), state_files(sg9)
    assert all(patched[t] != pristine[t] for t in TARGETS)
    assert {r.id: r.status for r in status(manifest, sg9)} == dict.fromkeys(ALL_IDS, "applied")
    for rel in TARGETS:
        py_compile.compile(str(sg9 / rel), doraise=True)

    again = apply(manifest, sg9, only=ALL_IDS)
    assert [(r.status, r.changed) for r in again] == [("already-applied", False)] * 3
    assert snapshot(sg9) == patched and state_files(sg9) == state

    reverted = revert(manifest, sg9)
    assert sorted(r.status for r in reverted) == ["reverted"] * 3
    assert snapshot(sg9) == pristine
    assert {rel: (sg9 / rel).read_bytes() for rel in TARGETS} == {rel: (wheel_dir("0.5.9") / rel).read_bytes() for rel in TARGETS}
    assert {r.id: r.status for r in status(manifest, sg9)} == dict.fromkeys(ALL_IDS, "pristine")
    assert state_files(sg9) == {"state.json": b'{\n  "patches": {},\n  "schema": 1,\n  "sglang_version": "0.5.9"\n}\n'}


def test_mode_is_kept(manifest: Manifest, sg9: Path) -> None:
    (sg9 / KIMI).chmod(0o640)
    apply(manifest, sg9, only=["kimi_k25_eagle3_delegation"])
    assert (sg9 / KIMI).stat().st_mode & 0o777 == 0o640


def test_check_changes_nothing(manifest: Manifest, sg9: Path) -> None:
    before = snapshot(sg9)
    results = apply(manifest, sg9, check=True)
    assert [(r.status, r.changed) for r in results] == [("would-apply", True)] * 2
    assert results[0].diff.startswith(f"--- a/{KIMI}\n+++ b/{KIMI}\n")
    assert "+    def get_embed_and_head(self):" in results[0].diff
    assert snapshot(sg9) == before and state_files(sg9) == {}
    apply(manifest, sg9)
    patched = snapshot(sg9)
    assert [r.status for r in revert(manifest, sg9, check=True)] == ["would-revert"] * 2
    assert snapshot(sg9) == patched


def test_drift_is_refused(manifest: Manifest, sg9: Path) -> None:
    (sg9 / SYMM).write_bytes((sg9 / SYMM).read_bytes() + b"# local edit\n")
    before = snapshot(sg9)
    with pytest.raises(DriftError) as err:
        apply(manifest, sg9)
    message = str(err.value)
    assert SYMM in message and "95a6a7703c6d3ccd" in message and sha256_bytes(before[SYMM]) in message
    assert snapshot(sg9) == before and state_files(sg9) == {}
    assert {r.id: r.status for r in status(manifest, sg9)}["torch_symm_mem_sm120"] == "drifted"


def test_revert_refuses_a_changed_patched_file(manifest: Manifest, sg9: Path) -> None:
    apply(manifest, sg9)
    (sg9 / KIMI).write_bytes((sg9 / KIMI).read_bytes() + b"# edit\n")
    before, state = snapshot(sg9), state_files(sg9)
    with pytest.raises(DriftError, match=r"expected sha256 .* found"):
        revert(manifest, sg9)
    assert snapshot(sg9) == before and state_files(sg9) == state


def test_one_failing_patch_changes_no_file(manifest_data: dict[str, Any], sg9: Path, tmp_path: Path) -> None:
    templates = tmp_path / "templates"
    shutil.copytree(PATCHES, templates)
    broken = templates / "torch_symm_mem_sm120.diff.j2"
    broken.write_text(broken.read_text().replace(" class TorchSymmMemCommunicator:", " class SomethingElse:"))
    before = snapshot(sg9)
    with pytest.raises(HunkError) as err:
        apply(load_manifest(manifest_data, templates), sg9)
    assert "torch_symm_mem_sm120" in str(err.value) and SYMM in str(err.value) and "hunk 1" in str(err.value)
    assert snapshot(sg9) == before and state_files(sg9) == {}


def test_template_that_does_not_compile_changes_no_file(manifest: Manifest, sg9: Path) -> None:
    before = snapshot(sg9)
    with pytest.raises(UsageError):
        apply(manifest, sg9, values={"sm120_all_reduce_max_mib": "{2: 'x'}"})
    with pytest.raises(UsageError):
        apply(manifest, sg9, values={"no_such_variable": "1"})
    assert snapshot(sg9) == before and state_files(sg9) == {}


def test_unknown_version_refused(manifest: Manifest, sg9: Path) -> None:
    version_py = sg9 / "_version.py"
    version_py.write_text(version_py.read_text().replace("'0.5.9'", "'0.5.8'"))
    before = snapshot(sg9)
    with pytest.raises(UnsupportedVersionError, match=r"0\.5\.8"):
        apply(manifest, sg9)
    assert snapshot(sg9) == before and state_files(sg9) == {}


def test_0_5_10_kimi_fixed_upstream(manifest: Manifest, sg10: Path) -> None:
    before = snapshot(sg10)
    results = apply(manifest, sg10, only=["kimi_k25_eagle3_delegation"])
    assert [(r.status, r.changed) for r in results] == [("fixed-upstream", False)]
    assert snapshot(sg10) == before
    # torch_symm_mem.py is byte-identical in 0.5.10 and still lacks the fix; the communicator patch is 0.5.9-only.
    assert [r.status for r in apply(manifest, sg10)] == ["fixed-upstream", "applied"]
    with pytest.raises(UnsupportedVersionError):
        apply(manifest, sg10, only=["flashinfer_allreduce_fusion_sm120"])


def test_changed_values_need_a_revert(manifest: Manifest, sg9: Path) -> None:
    apply(manifest, sg9)
    with pytest.raises(StateError, match="revert it first"):
        apply(manifest, sg9, values={"sm120_multimem_world_sizes": "[8]"})


def test_stale_state_after_wheel_reinstall(manifest: Manifest, sg9: Path) -> None:
    apply(manifest, sg9)
    for rel in TARGETS:
        shutil.copy2(wheel_dir("0.5.9") / rel, sg9 / rel)
    assert {r.id: r.status for r in status(manifest, sg9)} == dict.fromkeys(ALL_IDS, "pristine")
    assert [r.status for r in apply(manifest, sg9)] == ["applied", "applied"]


def test_hunks_apply_only_at_their_stated_line() -> None:
    diff = parse_unified_diff("--- a/x.py\n+++ b/x.py\n@@ -2,2 +2,3 @@\n b\n+new\n c\n")
    assert apply_diff(b"a\nb\nc\nd\n", diff) == b"a\nb\nnew\nc\nd\n"
    with pytest.raises(HunkError, match=re.escape("hunk 1: line 2 expected 'b\\n', found 'a\\n'")):
        apply_diff(b"z\na\nb\nc\nd\n", diff)
    with pytest.raises(HunkError, match="header says -2 \\+4"):
        parse_unified_diff("--- a/x.py\n+++ b/x.py\n@@ -2,2 +2,4 @@\n b\n+new\n c\n")
    no_eol = parse_unified_diff("--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+b\n")
    assert apply_diff(b"a", no_eol) == b"b\n"


# ---------------------------------------------------------------- the patched code


def patched_class(source: str, name: str) -> ast.ClassDef:
    return next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == name)


def test_kimi_delegation_passes_arguments_and_results(manifest: Manifest, sg9: Path) -> None:
    apply(manifest, sg9, only=["kimi_k25_eagle3_delegation"])
    cls = patched_class((sg9 / KIMI).read_text(), "KimiK25ForConditionalGeneration")
    wanted = ("get_embed_and_head", "set_embed_and_head", "set_eagle3_layers_to_capture")
    methods = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    assert sorted(m.name for m in methods) == sorted(wanted)
    namespace: dict[str, Any] = {"Optional": Any, "List": list}
    exec(compile(ast.Module(body=methods, type_ignores=[]), KIMI, "exec"), namespace)

    class Recorder:
        def __init__(self) -> None:
            self.calls: list[tuple[str, tuple[Any, ...]]] = []

        def __getattr__(self, name: str) -> Any:
            def call(*args: Any) -> Any:
                self.calls.append((name, args))
                return ("result-of", name, args)

            return call

    model = type("Model", (), {name: namespace[name] for name in wanted})()
    model.language_model = Recorder()
    assert model.get_embed_and_head() == ("result-of", "get_embed_and_head", ())
    assert model.set_embed_and_head("E", "H") == ("result-of", "set_embed_and_head", ("E", "H"))
    assert model.set_eagle3_layers_to_capture([2, 30, 58]) == ("result-of", "set_eagle3_layers_to_capture", ([2, 30, 58],))
    assert model.set_eagle3_layers_to_capture() == ("result-of", "set_eagle3_layers_to_capture", (None,))
    assert [c[0] for c in model.language_model.calls] == [
        "get_embed_and_head",
        "set_embed_and_head",
        "set_eagle3_layers_to_capture",
        "set_eagle3_layers_to_capture",
    ]


def symm_tables(source: str) -> tuple[dict[int, dict[int, int]], dict[int, list[int]]]:
    """Evaluate the patched module-level size table and the class's multimem table from the source."""
    tree = ast.parse(source)
    sizes_node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "_ALL_REDUCE_MAX_SIZES")
    sizes = eval(compile(ast.Expression(sizes_node.value), SYMM, "eval"), {"TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES": {9: {}, 10: {}}})
    cls = patched_class(source, "TorchSymmMemCommunicator")
    multimem_node = next(n for n in cls.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "_WORLD_SIZES_MULTIMEM")
    return sizes, ast.literal_eval(multimem_node.value)


def test_symm_mem_defaults(manifest: Manifest, sg9: Path) -> None:
    apply(manifest, sg9, only=["torch_symm_mem_sm120"])
    sizes, multimem = symm_tables((sg9 / SYMM).read_text())
    assert sizes == {9: {}, 10: {}, 12: {2: 64 << 20, 4: 64 << 20, 8: 64 << 20}}
    assert multimem == {9: [4, 6, 8], 10: [6, 8], 12: []}
    py_compile.compile(str(sg9 / SYMM), doraise=True)
    source = (sg9 / SYMM).read_text()
    assert "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES[self.device_capability]" not in source
    assert "_ALL_REDUCE_MAX_SIZES.get(self.device_capability, {})" in source
    # By default SM120 without multicast still disables itself, as upstream does.
    assert "or not False" in source


def test_symm_mem_set_overrides(sg9: Path) -> None:
    done = run_cli(
        "apply", "--sglang", str(sg9), "--only", "torch_symm_mem_sm120",
        "--set", "sm120_all_reduce_max_mib={2: 32, 8: 128}", "--set", "sm120_multimem_world_sizes=[8, 4]",
        "--set", "sm120_two_shot_without_multicast=True",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    sizes, multimem = symm_tables((sg9 / SYMM).read_text())
    assert sizes[12] == {2: 32 << 20, 8: 128 << 20}
    assert multimem[12] == [4, 8]
    assert "or not True" in (sg9 / SYMM).read_text()
    py_compile.compile(str(sg9 / SYMM), doraise=True)


# ---------------------------------------------------------------- lint: patches proven, not only applied


def old_templates(tmp_path: Path) -> Path:
    """roles/sglang_patches/files/patches with the torch_symm_mem template as it was before issue 12 (`64 * MiB`)."""
    templates = tmp_path / "old-templates"
    shutil.copytree(PATCHES, templates)
    shutil.copy2(OLD_SYMM_TEMPLATE, templates / "torch_symm_mem_sm120.diff.j2")
    return templates


def test_shipped_patches_add_no_pyflakes_message(manifest: Manifest, sg9: Path) -> None:
    results = apply(manifest, sg9, only=ALL_IDS, lint=True)
    assert [r.status for r in results] == ["applied"] * 3


def test_lint_refusal_names_patch_file_and_line_and_changes_nothing(manifest_data: dict[str, Any], sg9: Path, tmp_path: Path) -> None:
    old = load_manifest(manifest_data, old_templates(tmp_path))
    before = snapshot(sg9)
    with pytest.raises(LintError) as err:
        apply(old, sg9)  # lint=None: pyflakes is installed here, so it lints
    assert str(err.value) == (
        "patch torch_symm_mem_sm120: the patched file has problems the pristine one has not: "
        f"{SYMM}:32: undefined name 'MiB' (UndefinedName); nothing changed"
    )
    with pytest.raises(LintError):
        apply(old, sg9, check=True)
    assert snapshot(sg9) == before and state_files(sg9) == {}
    # Without the lint the old template applies: it compiles, which is why it went unnoticed.
    assert [r.status for r in apply(old, sg9, lint=False)] == ["applied", "applied"]
    py_compile.compile(str(sg9 / SYMM), doraise=True)


def test_lint_without_pyflakes(manifest_data: dict[str, Any], sg9: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a host without pyflakes the engine skips the lint unless it is required."""
    from sglang_sm120.patches import engine as sglang_patches
    from sglang_sm120.patches import lint as patch_lint

    def missing(*_args: Any) -> list[Any]:
        raise patch_lint.LintUnavailable("No module named 'pyflakes'")

    monkeypatch.setattr(sglang_patches, "new_problems", missing)
    old = load_manifest(manifest_data, old_templates(tmp_path))
    expected = "patch kimi_k25_eagle3_delegation: cannot lint srt/models/kimi_k25.py: No module named 'pyflakes'"
    with pytest.raises(SglangPatchError, match=re.escape(expected)):
        apply(old, sg9, lint=True)
    assert state_files(sg9) == {}
    assert [r.status for r in apply(old, sg9, lint=None)] == ["applied", "applied"]


def test_lint_compares_messages_not_lines() -> None:
    from sglang_sm120.patches.lint import lint, new_problems

    pristine = b"import os\n\nx = undefined_upstream\n"
    # Upstream's own warnings, moved down by the patch, are not new.
    moved = b"import os\n\n# a comment\n\nx = undefined_upstream\n"
    assert [m.kind for m in lint(pristine, "f.py")] == ["UnusedImport", "UndefinedName"]
    assert new_problems(pristine, moved, "f.py") == []
    # A second occurrence of an existing message is new, reported at the changed line.
    again = b"import os\n\nx = undefined_upstream\ny = undefined_upstream\n"
    assert [(m.line, m.text) for m in new_problems(pristine, again, "f.py")] == [(4, "undefined name 'undefined_upstream'")]
    broken = b"import os\n\nx = (\n"
    assert [m.kind for m in new_problems(pristine, broken, "f.py")] == ["SyntaxError"]


def test_controller_lints_against_the_hosts_pristine_files(
    manifest_data: dict[str, Any], manifest: Manifest, sg9: Path, tmp_path: Path
) -> None:
    """What the role does: the host returns the pristine bytes, the controller lints the rendered diffs."""
    originals = pristine_sources(manifest, sg9)
    assert sorted(originals) == sorted(TARGETS)
    assert {t: (e["sha256"], e["source"]) for t, e in originals.items()} == {
        t: (sha256_bytes((sg9 / t).read_bytes()), str(sg9 / t)) for t in TARGETS
    }
    sources = {t: e["content"] for t, e in originals.items()}
    assert prove_rendered(load_manifest(manifest_data, rendered=render_selected(manifest)), sources) == ALL_IDS[:2]
    old = load_manifest(manifest_data, old_templates(tmp_path))
    with pytest.raises(LintError, match=f"patch torch_symm_mem_sm120: .*{re.escape(SYMM)}:32: undefined name 'MiB'"):
        prove_rendered(load_manifest(manifest_data, rendered=render_selected(old)), sources)

    # Once applied, the pristine bytes come from the state's copy; a drifted file is left out.
    apply(manifest, sg9)
    after = pristine_sources(manifest, sg9)
    assert after[KIMI]["content"] == sources[KIMI] and after[KIMI]["source"].startswith(str(default_state_dir(sg9)))
    (sg9 / SYMM).write_bytes(b"# drifted\n")
    assert SYMM not in pristine_sources(manifest, sg9, targets=[SYMM])
    with pytest.raises(UsageError, match="not the target of any patch"):
        pristine_sources(manifest, sg9, targets=["srt/nope.py"])


# ---------------------------------------------------------------- CLI


def test_cli_refuses_the_old_mib_template(sg9: Path, tmp_path: Path) -> None:
    templates = old_templates(tmp_path)
    before = snapshot(sg9)
    refused = run_cli("apply", "--sglang", str(sg9), "--manifest", str(templates / "manifest.yml"))
    assert refused.returncode == 1 and refused.stdout == ""
    assert (
        f"patch torch_symm_mem_sm120: the patched file has problems the pristine one has not: {SYMM}:32: undefined name 'MiB'"
        in refused.stderr
    )
    assert snapshot(sg9) == before and state_files(sg9) == {}


def test_cli_exit_codes(sg9: Path, tmp_path: Path) -> None:
    before = snapshot(sg9)
    check = run_cli("apply", "--sglang", str(sg9), "--check", "--diff")
    assert check.returncode == 0, check.stderr
    assert "kimi_k25_eagle3_delegation: would-apply" in check.stdout and "+++ b/srt/models/kimi_k25.py" in check.stdout
    assert snapshot(sg9) == before

    assert run_cli("apply", "--sglang", str(sg9), "--only", "nope").returncode == 2
    assert run_cli("apply", "--sglang", str(sg9), "--set", "novalue").returncode == 2
    assert run_cli("frobnicate", "--sglang", str(sg9)).returncode == 2
    assert snapshot(sg9) == before

    state = tmp_path / "state"
    assert run_cli("apply", "--sglang", str(sg9), "--state-dir", str(state)).returncode == 0
    assert (state / "state.json").exists() and not default_state_dir(sg9).exists()
    shown = run_cli("status", "--sglang", str(sg9), "--state-dir", str(state))
    assert shown.returncode == 0 and "torch_symm_mem_sm120: applied" in shown.stdout

    (sg9 / KIMI).write_bytes(b"# drifted\n")
    failed = run_cli("revert", "--sglang", str(sg9), "--state-dir", str(state))
    assert failed.returncode == 1
    assert failed.stderr.count("\n") == 1 and "kimi_k25_eagle3_delegation" in failed.stderr


# ---------------------------------------------------------------- rendered on the controller


def test_prerendered_patches_apply_like_templates(manifest_data: dict[str, Any], manifest: Manifest, sg9: Path, tmp_path: Path) -> None:
    """What Ansible does: render on the controller, apply on the host with no template directory."""
    twin = copy_tree("0.5.9", tmp_path / "twin")
    rendered = render_selected(manifest, values={"sm120_all_reduce_max_mib": {8: 32}})
    assert sorted(rendered) == ["kimi_k25_eagle3_delegation", "torch_symm_mem_sm120"]
    assert rendered["torch_symm_mem_sm120"]["values"]["sm120_all_reduce_max_mib"] == {"8": 32}
    host_side = load_manifest(manifest_data, rendered=json.loads(json.dumps(rendered)))
    apply(host_side, sg9, values={"sm120_all_reduce_max_mib": {8: 32}})
    apply(manifest, twin, values={"sm120_all_reduce_max_mib": {8: 32}})
    assert snapshot(sg9) == snapshot(twin)


def test_prerendered_with_other_values_is_refused(manifest_data: dict[str, Any], manifest: Manifest, sg9: Path) -> None:
    before = snapshot(sg9)
    rendered = render_selected(manifest)
    host_side = load_manifest(manifest_data, rendered=rendered)
    with pytest.raises(UsageError, match="pre-rendered with values"):
        apply(host_side, sg9, values={"sm120_multimem_world_sizes": [8]})
    assert snapshot(sg9) == before and state_files(sg9) == {}


def test_prerendered_entry_must_be_known(manifest_data: dict[str, Any]) -> None:
    with pytest.raises(ManifestError, match="'no_such_patch' is not in the manifest"):
        load_manifest(manifest_data, rendered={"no_such_patch": {"values": {}, "text": ""}})


# ---------------------------------------------------------------- locating the package


def fake_venv(root: Path, version: str = "0.5.9", python: str = "3.11", dist: str | None = "0.5.9") -> Path:
    (root / "pyvenv.cfg").parent.mkdir(parents=True, exist_ok=True)
    (root / "pyvenv.cfg").write_text(f"home = /usr/bin\ninclude-system-site-packages = false\nversion = {python}.2\n")
    site = root / "lib" / f"python{python}" / "site-packages"
    shutil.copytree(wheel_dir(version), site / "sglang", ignore=shutil.ignore_patterns("*.so"))
    if dist:
        (site / f"sglang-{dist}.dist-info").mkdir()
    return root


def test_find_sglang_in_a_venv(tmp_path: Path) -> None:
    venv = fake_venv(tmp_path / "venv")
    (venv / "lib64").symlink_to("lib")
    found = find_sglang(venv)
    assert found.version == "0.5.9" and found.python_version == "3.11" and found.dist_info_version == "0.5.9"
    assert found.sglang_dir == str(venv / "lib/python3.11/site-packages/sglang")


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda p: p, "is not a virtualenv"),
        (lambda p: (p.mkdir(), (p / "pyvenv.cfg").write_text("version = 3.11.2\n")), "no sglang package in the virtualenv"),
        (lambda p: fake_venv(p, dist="0.5.10"), "version.py says 0.5.9 but pip installed sglang 0.5.10"),
    ],
    ids=["missing", "empty", "mixed"],
)
def test_find_sglang_says_what_is_wrong(tmp_path: Path, setup: Any, message: str) -> None:
    venv = tmp_path / "venv"
    setup(venv)
    with pytest.raises(SglangPackageError, match=message):
        find_sglang(venv)


# ---------------------------------------------------------------- ranges, outcomes, messages (issue 14)


def test_versions_compare_as_versions() -> None:
    from sglang_sm120.patches.manifest import version_in_range, version_key

    assert sorted(["0.5.10", "0.5.9", "0.5.13.post1", "0.5.13", "0.5.10.post1"], key=version_key) == [
        "0.5.9",
        "0.5.10",
        "0.5.10.post1",
        "0.5.13",
        "0.5.13.post1",
    ]
    assert version_in_range("0.5.13.post1", ">=0.5.9,<0.5.14") and not version_in_range("0.5.14", ">=0.5.9,<0.5.14")
    assert not version_in_range("0.5.8", ">=0.5.9,<0.5.14")


def test_refusal_lists_versions_in_version_order(manifest_data: dict[str, Any], sg9: Path, tmp_path: Path) -> None:
    data = json.loads(json.dumps(manifest_data))
    symm = next(p for p in data["patches"] if p["id"] == "torch_symm_mem_sm120")
    symm["applies_to"] = ">=0.5.10,<0.5.14"
    del symm["versions"]["0.5.9"]
    custom = tmp_path / "manifest.yml"
    custom.write_text(yaml.safe_dump(data))
    for name in ("kimi_k25_eagle3_delegation.diff.j2", "torch_symm_mem_sm120.diff.j2", "torch_symm_mem_sm120.spdx.diff.j2"):
        shutil.copy2(ROOT / "roles/sglang_patches/files/patches" / name, tmp_path / name)
    refused = run_cli("apply", "--sglang", str(sg9), "--only", "torch_symm_mem_sm120", "--manifest", str(custom))
    assert refused.returncode == 1
    assert "written for SGLang >=0.5.10,<0.5.14 (pristine files known from 0.5.10, 0.5.11, 0.5.13)" in refused.stderr


def test_symm_mem_fixed_upstream_by_what_the_code_does(manifest: Manifest) -> None:
    from sglang_sm120.patches.engine import fixed_upstream

    spec = manifest.get("torch_symm_mem_sm120")
    for version, fixed in (("0.5.9", False), ("0.5.13", False), ("0.5.15", True), ("0.5.23", True)):
        assert fixed_upstream(spec, (wheel_dir(version) / SYMM).read_bytes()) is fixed, version
    # .get() on one table is not enough while the other is still indexed
    text = (
        (wheel_dir("0.5.15") / SYMM)
        .read_text()
        .replace(
            "self._WORLD_SIZES_MULTIMEM.get(\n            self.device_capability, ()\n        )",
            "self._WORLD_SIZES_MULTIMEM[self.device_capability]",
        )
    )
    assert fixed_upstream(spec, text.encode()) is False


def test_drift_within_the_range_is_refused(tmp_path: Path) -> None:
    tree = tmp_path / "sglang"
    shutil.copytree(wheel_dir("0.5.11"), tree)
    (tree / SYMM).write_text((tree / SYMM).read_text() + "# local change\n")
    before = snapshot(tree)
    refused = run_cli("apply", "--sglang", str(tree))
    assert refused.returncode == 1 and "has drifted" in refused.stderr and "nothing changed" in refused.stderr
    assert snapshot(tree) == before


def test_missing_target_is_not_applicable(tmp_path: Path) -> None:
    tree = tmp_path / "sglang"
    shutil.copytree(wheel_dir("0.5.23"), tree)
    done = run_cli("apply", "--sglang", str(tree), "--only", "flashinfer_allreduce_fusion_sm120")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "flashinfer_allreduce_fusion_sm120: not-applicable (srt/layers/communicator.py)\n"


def test_apply_prints_the_new_hash_and_revert_says_when_nothing_is_recorded(sg9: Path) -> None:
    pristine = sha256_bytes((sg9 / KIMI).read_bytes())
    applied = run_cli("apply", "--sglang", str(sg9), "--only", "kimi_k25_eagle3_delegation")
    now = sha256_bytes((sg9 / KIMI).read_bytes())
    assert f"kimi_k25_eagle3_delegation: applied ({KIMI}) sha256={now} (was {pristine})" in applied.stdout
    reverted = run_cli("revert", "--sglang", str(sg9))
    assert f"sha256={pristine} (was {now})" in reverted.stdout
    empty = run_cli("revert", "--sglang", str(sg9))
    assert empty.returncode == 0 and "nothing to revert: no patch is recorded in" in empty.stdout


def test_prerendered_variant_for_the_spdx_file(manifest: Manifest, tmp_path: Path) -> None:
    """Rendered on the controller, applied on a 0.5.13 host: the variant for that pristine sha256 is used."""
    rendered = render_selected(manifest)
    assert set(rendered["torch_symm_mem_sm120"]["variants"]) == {"a073dd175f81bb4ad912872e2e1b23d682473eed48fa4a78d992b1798b3fd007"}
    tree = tmp_path / "sglang"
    shutil.copytree(wheel_dir("0.5.13"), tree)
    results = apply(
        load_manifest(yaml.safe_load((ROOT / "roles/sglang_patches/files/patches/manifest.yml").read_text()), rendered=rendered),
        tree,
        tmp_path / "state",
    )
    assert [r.status for r in results] == ["fixed-upstream", "applied"]
