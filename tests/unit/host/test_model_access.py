"""The service's user must be able to read the model directories inside the unit's sandbox
(plugins/module_utils/sglang_sm120/launch/model_access.py, checked by the launch plan before the build)."""

from __future__ import annotations

import grp
import os
import pwd
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT
from sglang_sm120.launch.model_access import HIDDEN, Identity, ModelAccessError, check, identity, problems

UID, GID = 54321, 54321  # a service user that owns nothing here
SVC = Identity("svc", UID, frozenset({GID}))


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory whose ancestors anyone may enter (/var/tmp), unlike pytest's tmp_path (0700 above it)."""
    path = Path(tempfile.mkdtemp(prefix="model-access-", dir="/var/tmp"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path)


def model(at: Path, dir_mode: int = 0o755, file_mode: int = 0o644) -> Path:
    at.mkdir(parents=True)
    for name in ("config.json", "model-00001-of-00002.safetensors"):
        (at / name).write_text("{}")
        os.chmod(at / name, file_mode)
    os.chmod(at, dir_mode)
    return at


def test_the_unit_template_hides_what_the_check_says_it_hides() -> None:
    unit = (ROOT / "roles/sglang_service/templates/sglang.service.j2").read_text()
    for setting in {s for _prefix, s in HIDDEN}:
        assert re.search(rf"^{re.escape(setting)}$", unit, re.M), setting


def test_a_world_readable_model_passes_and_each_kind_of_lock_out_is_named(base: Path) -> None:
    ok = model(base / "ok")
    assert problems(str(ok), SVC, hidden=()) == ([], [])
    closed = model(base / "closed", dir_mode=0o700)
    found, _ = problems(str(closed), SVC, hidden=())
    owner = f"{pwd.getpwuid(os.stat(closed).st_uid).pw_name}:{grp.getgrgid(os.stat(closed).st_gid).gr_name}"
    assert found == [f"{closed} ({owner}, mode 0700) does not let svc list and enter it"]
    private = model(base / "private", file_mode=0o600)
    found, _ = problems(str(private), SVC, hidden=())
    assert [f.split(" (")[0] for f in found] == [str(private / "config.json"), str(private / "model-00001-of-00002.safetensors")]
    assert all(f.endswith("does not let svc read it") for f in found)
    # a parent the user cannot enter is named, not the files below it
    (base / "deep").mkdir()
    inner = model(base / "deep" / "inner")
    os.chmod(base / "deep", 0o700)
    found, _ = problems(str(inner), SVC, hidden=())
    assert len(found) == 1 and found[0].startswith(f"{base / 'deep'} (") and "does not let svc enter it" in found[0]


def test_owner_and_group_bits_count_as_the_kernel_counts_them(base: Path) -> None:
    grouped = model(base / "grouped", dir_mode=0o750, file_mode=0o640)
    os.chown(grouped, 0, GID)
    for name in os.listdir(grouped):
        os.chown(grouped / name, 0, GID)
    assert problems(str(grouped), SVC, hidden=())[0] == []
    assert problems(str(grouped), Identity("other", UID + 1, frozenset({GID + 1})), hidden=())[0] != []
    owned = model(base / "owned", dir_mode=0o700, file_mode=0o600)
    for path in (owned, *owned.iterdir()):
        os.chown(path, UID, 0)
    assert problems(str(owned), SVC, hidden=())[0] == []
    # owner bits decide for the owner even where "other" would allow (mode 0077)
    os.chmod(owned, 0o077)
    assert problems(str(owned), SVC, hidden=())[0] != []


def test_the_sandbox_hides_a_model_under_a_hidden_path_also_through_a_link(base: Path) -> None:
    hidden = ((str(base / "home"), "ProtectHome=yes"),)
    inside = model(base / "home" / "op" / "kimi")
    found, _ = problems(str(inside), SVC, hidden=hidden)
    assert found == [f"{inside} is under {base / 'home'}, which the unit hides from the server (ProtectHome=yes)"]
    link = base / "models"
    link.symlink_to(inside)
    assert problems(str(link), SVC, hidden=hidden)[0] == found  # the sandbox applies to where the link points
    # a Hugging Face cache snapshot whose files link into a hidden blob store
    snapshot = base / "snap"
    snapshot.mkdir()
    (snapshot / "config.json").symlink_to(inside / "config.json")
    found, _ = problems(str(snapshot), SVC, hidden=hidden)
    assert found and found[0].startswith(f"{snapshot / 'config.json'} links to {inside / 'config.json'} is under")


def test_the_real_sandbox_covers_home_root_run_user_and_the_private_tmps() -> None:
    for path in ("/home/op/models/kimi", "/root/kimi", "/run/user/1000/kimi", "/tmp/kimi", "/var/tmp/kimi"):
        found, _ = problems(path, SVC)
        assert len(found) == 1 and "which the unit hides from the server" in found[0], path
    # /home is a directory prefix, not a string start: /homes is not hidden
    assert not any("hides" in f for f in problems("/homes/kimi", SVC)[0])


def test_a_user_not_created_yet_is_judged_as_a_new_system_user(base: Path) -> None:
    ghost = identity("no-such-user-for-sure")
    assert ghost.uid is None and not ghost.exists and "not created yet" in ghost.describe()
    assert problems(str(model(base / "open")), ghost, hidden=())[0] == []
    assert problems(str(model(base / "shut", dir_mode=0o750)), ghost, hidden=())[0] != []
    assert identity("root").uid == 0 and problems("/root", identity("root"), hidden=())[0] == []


def test_the_error_names_flag_path_user_and_the_inventory_variable(base: Path) -> None:
    closed = model(base / "Kimi-K2.5-NVFP4", dir_mode=0o700)
    with pytest.raises(ModelAccessError) as caught:
        check([("model-path", str(closed), "stack_model_path")], "nobody", hidden=())
    text = str(caught.value)
    assert text.startswith(f"start gate: --model-path {closed}: the service's user nobody (uid ")
    assert "does not let nobody list and enter it" in text and "set stack_model_path to a copy that is; nothing changed" in text
    assert check([("model-path", str(model(base / "open")), "stack_model_path")], "nobody", hidden=()) == []


def test_the_launch_plan_module_refuses_a_model_the_unit_cannot_see_before_anything_is_built(tmp_path) -> None:
    """plugins/modules/sglang_launch_plan.py through real Ansible: a target directory read on the host under /tmp
    (PrivateTmp=yes hides it from the unit) fails the plan naming it; the draft given as config files is not judged."""
    from test_launch_plan import MODEL_DIRS, STACK, module_args
    from test_modules import run_module

    target = tmp_path / "Kimi-K2.5-NVFP4"
    shutil.copytree(MODEL_DIRS[STACK["stack_model_path"]], target)
    draft = STACK["stack_draft_model_path"]
    args = module_args({draft: MODEL_DIRS[draft]}, extra_flags={"model-path": str(target)})
    assert not run_module("sglang_launch_plan", args).get("failed")  # no service_user: nothing judged
    refused = run_module("sglang_launch_plan", {**args, "service_user": "sglang"})
    assert refused.get("failed"), refused
    assert refused["msg"].startswith(f"start gate: --model-path {target}: the service's user sglang"), refused["msg"]
    assert "which the unit hides from the server (PrivateTmp=yes)" in refused["msg"] and draft not in refused["msg"]
