"""A set of files and directories made to hold their content, mode and owner in one pass
(plugins/module_utils/sglang_sm120/files.py ensure_file_set, plugins/modules/sglang_files.py)."""

from __future__ import annotations

import grp
import os
import stat

import pytest
from test_modules import run_module

from sglang_sm120.errors import ToolkitError
from sglang_sm120.files import DirSpec, FileSpec, ensure_file_set, parse_mode

# A group other than root's that every Debian host has (the tests run as root, as the module does on hosts).
OTHER_GROUP = "daemon"


def mode_of(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_writes_the_set_then_changes_nothing(tmp_path):
    unit, keys = tmp_path / "rel" / "sglang.service", tmp_path / "etc" / "keys.yaml"
    specs = [FileSpec(unit, b"[Unit]\n"), FileSpec(keys, b"api-key: x\n", 0o640, "root", OTHER_GROUP)]
    dirs = [DirSpec(tmp_path / "etc", 0o750, "root", OTHER_GROUP)]
    first = ensure_file_set(specs, dirs)
    assert first.changed_paths == [str(tmp_path / "etc"), str(unit), str(keys)]
    assert unit.read_bytes() == b"[Unit]\n" and mode_of(unit) == 0o644
    assert mode_of(keys) == 0o640 and os.stat(keys).st_gid == grp.getgrnam(OTHER_GROUP).gr_gid
    assert mode_of(tmp_path / "etc") == 0o750
    again = ensure_file_set(specs, dirs)
    assert not again.changed and again.diff == []


def test_a_content_change_is_diffed_and_check_mode_writes_nothing(tmp_path):
    env = tmp_path / "sglang.env"
    env.write_text("A=1\n")
    env.chmod(0o644)
    would = ensure_file_set([FileSpec(env, b"A=2\n")], check_mode=True)
    assert would.changed_paths == [str(env)]
    assert would.diff == [{"before_header": str(env), "after_header": str(env), "before": "A=1\n", "after": "A=2\n"}]
    assert env.read_text() == "A=1\n"
    done = ensure_file_set([FileSpec(env, b"A=2\n")])
    assert done.changed and env.read_text() == "A=2\n"
    assert not list(tmp_path.glob(".sglang.env.*")), "the temp file of the atomic write is left behind"


def test_a_wrong_mode_alone_is_fixed_in_place(tmp_path):
    secrets = tmp_path / "secrets.env"
    secrets.write_text("K=v\n")
    secrets.chmod(0o644)
    inode = os.stat(secrets).st_ino
    outcome = ensure_file_set([FileSpec(secrets, b"K=v\n", 0o600)])
    assert outcome.changed_paths == [str(secrets)] and outcome.diff == []
    assert mode_of(secrets) == 0o600 and os.stat(secrets).st_ino == inode


def test_absent_removes_only_what_exists(tmp_path):
    old = tmp_path / "api-keys.yaml"
    old.write_text("api-key: old\n")
    outcome = ensure_file_set([FileSpec(old, None), FileSpec(tmp_path / "never-there", None)])
    assert outcome.changed_paths == [str(old)] and not old.exists()
    assert outcome.diff[0]["after_header"] == f"{old} (absent)"
    assert not ensure_file_set([FileSpec(old, None)]).changed


def test_an_unknown_owner_writes_nothing_of_the_set(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    with pytest.raises(ToolkitError, match=r"b: the group 'no-such-group' is not a group on this host; nothing of this file set"):
        ensure_file_set([FileSpec(first, b"a\n"), FileSpec(second, b"b\n", group="no-such-group")])
    assert not first.exists() and not second.exists()


def test_a_file_where_a_directory_should_be_is_refused(tmp_path):
    blocker = tmp_path / "etc"
    blocker.write_text("not a directory\n")
    with pytest.raises(ToolkitError, match="expected a directory"):
        ensure_file_set([], [DirSpec(blocker, 0o750)])


@pytest.mark.parametrize("value", ["0640", 0o640, " 640"])
def test_modes_read_as_octal(value):
    assert parse_mode(value, "x") == 0o640


@pytest.mark.parametrize("value", ["rw-r-----", "0999", "77777", True, None])
def test_a_bad_mode_names_where(value):
    with pytest.raises(ToolkitError, match=r"^/etc/sglang/keys: mode must be an octal string"):
        parse_mode(value, "/etc/sglang/keys")


def test_the_module_writes_diffs_and_is_idempotent(tmp_path):
    unit = tmp_path / "sglang.service"
    args = {"files": [{"path": str(unit), "content": "[Service]\n"}], "directories": [{"path": str(tmp_path / "d"), "mode": "0700"}]}
    first = run_module("sglang_files", args, flags=("--diff",))
    assert not first.get("failed"), first.get("msg")
    assert first["changed"] and first["changed_paths"] == [str(tmp_path / "d"), str(unit)]
    assert first["diff"][0]["after"] == "[Service]\n"
    assert unit.read_text() == "[Service]\n" and mode_of(tmp_path / "d") == 0o700
    second = run_module("sglang_files", args)
    assert second["changed"] is False and second["changed_paths"] == []


def test_the_module_refuses_present_without_content(tmp_path):
    result = run_module("sglang_files", {"files": [{"path": str(tmp_path / "x")}]})
    assert (
        result["failed"]
        and result["msg"] == f"files: {tmp_path / 'x'} has state=present but no content; nothing of this file set was written"
    )


def test_check_mode_takes_an_owner_not_created_yet_as_a_change(tmp_path):
    keys = tmp_path / "keys.yaml"
    keys.write_text("api-key: x\n")
    keys.chmod(0o640)
    would = ensure_file_set([FileSpec(keys, b"api-key: x\n", 0o640, "root", "no-such-group")], check_mode=True)
    assert would.changed_paths == [str(keys)] and keys.read_text() == "api-key: x\n"


def test_a_link_is_made_replaced_and_left_alone(tmp_path):
    from sglang_sm120.files import LinkSpec

    unit = tmp_path / "etc" / "sglang.service"
    link = LinkSpec(unit, "/opt/sglang/current/sglang.service")  # the target need not exist
    would = ensure_file_set([], check_mode=True, links=[link])
    assert would.changed_paths == [str(unit)] and not os.path.lexists(unit)
    assert would.diff[0]["after"] == "symbolic link to /opt/sglang/current/sglang.service\n"
    assert ensure_file_set([], links=[link]).changed_paths == [str(unit)]
    assert os.readlink(unit) == "/opt/sglang/current/sglang.service"
    assert not ensure_file_set([], links=[link]).changed
    os.unlink(unit)
    os.symlink("/elsewhere", unit)
    moved = ensure_file_set([], links=[link])
    assert moved.diff[0]["before"] == "symbolic link to /elsewhere\n" and os.readlink(unit) == link.target
    os.unlink(unit)
    unit.write_text("[Unit]\n")  # a plain file where the link belongs is replaced
    assert ensure_file_set([], links=[link]).changed and os.readlink(unit) == link.target
    assert sorted(os.listdir(unit.parent)) == ["sglang.service"]  # no temporary link left beside it


def test_a_directory_where_a_link_belongs_is_refused(tmp_path):
    from sglang_sm120.files import LinkSpec

    (tmp_path / "unit").mkdir()
    with pytest.raises(ToolkitError, match=r"unit: expected a symbolic link to /x, found a directory"):
        ensure_file_set([], links=[LinkSpec(tmp_path / "unit", "/x")])


def test_the_module_makes_links_after_the_files(tmp_path):
    unit, link = tmp_path / "rel" / "sglang.service", tmp_path / "systemd" / "sglang.service"
    args = {"files": [{"path": str(unit), "content": "[Service]\n"}], "links": [{"path": str(link), "target": str(unit)}]}
    first = run_module("sglang_files", args, flags=("--diff",))
    assert first["changed_paths"] == [str(unit), str(link)] and link.read_text() == "[Service]\n"
    assert run_module("sglang_files", args)["changed"] is False
