"""The unit's systemd-analyze checks (plugins/module_utils/sglang_sm120/serve/unit_check.py): what fails, what the
record keeps, and when the checks run again. The real systemd-analyze runs in molecule/service."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from sglang_sm120.serve.unit_check import UnitCheckError, check_unit

SECURITY = "  NAME  DESCRIPTION  EXPOSURE\n...\n-> Overall exposure level for sglang.service: {score} OK :-)\n"


class Analyze:
    """Stands in for systemd-analyze: what verify and security print, and every call made."""

    def __init__(self, verify: str = "", score: str = "2.1", verify_rc: int = 0) -> None:
        self.verify, self.score, self.verify_rc = verify, score, verify_rc
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> tuple[int, str, str]:
        self.calls.append(list(argv))
        if argv[1] == "verify":
            return self.verify_rc, "", self.verify
        return 0, SECURITY.format(score=self.score) if self.score else "no rating\n", ""


@pytest.fixture()
def unit(tmp_path: Path) -> tuple[str, str, str]:
    """(unit file, systemd-analyze binary, stamp)"""
    path = tmp_path / "sglang.service"
    path.write_text("[Service]\nExecStart=/bin/true\n")
    binary = tmp_path / "systemd-analyze"
    binary.write_text("#!/bin/sh\n")
    return str(path), str(binary), str(tmp_path / "sglang.service.checked.json")


def test_a_passing_unit_is_recorded_and_not_checked_again_while_nothing_changed(unit: tuple[str, str, str]) -> None:
    path, binary, stamp = unit
    analyze = Analyze()
    first = check_unit(path, 4.5, binary, analyze, stamp)
    assert (first.score, first.cached) == (2.1, False)
    assert first.security_line.endswith("Overall exposure level for sglang.service: 2.1 OK :-)")
    assert [call[1] for call in analyze.calls] == ["verify", "security"]
    again = check_unit(path, 4.5, binary, analyze, stamp)
    assert (again.score, again.cached, again.security_line) == (2.1, True, first.security_line)
    assert len(analyze.calls) == 2


@pytest.mark.parametrize("change", ["unit", "ceiling", "binary"])
def test_a_changed_unit_ceiling_or_systemd_analyze_checks_again(unit: tuple[str, str, str], change: str) -> None:
    path, binary, stamp = unit
    analyze = Analyze()
    check_unit(path, 4.5, binary, analyze, stamp)
    ceiling = 4.5
    if change == "unit":
        Path(path).write_text("[Service]\nExecStart=/bin/false\n")
    elif change == "ceiling":
        ceiling = 3.0
    else:
        Path(binary).write_text("#!/bin/sh\n# another build\n")
    assert check_unit(path, ceiling, binary, analyze, stamp).cached is False
    assert len(analyze.calls) == 4


def test_a_lowered_ceiling_fails_a_unit_that_passed_before(unit: tuple[str, str, str]) -> None:
    path, binary, stamp = unit
    check_unit(path, 4.5, binary, Analyze(), stamp)
    with pytest.raises(UnitCheckError) as failed:
        check_unit(path, 1.0, binary, Analyze(), stamp)
    assert str(failed.value) == (
        f"{path}: systemd-analyze security rates its exposure 2.1, expected at most sglang_service_security_ceiling=1.0; "
        "nothing was switched or restarted"
    )


def test_any_line_verify_prints_fails_and_nothing_is_recorded(unit: tuple[str, str, str]) -> None:
    path, binary, stamp = unit
    analyze = Analyze(verify="sglang.service:3: Unknown key name 'Foo' in section 'Service', ignoring.")
    with pytest.raises(UnitCheckError, match=r"systemd-analyze verify says \(exit 0\): sglang.service:3: Unknown key name"):
        check_unit(path, 4.5, binary, analyze, stamp)
    assert [call[1] for call in analyze.calls] == ["verify"]
    assert not Path(stamp).exists()
    with pytest.raises(UnitCheckError, match=r"\(exit 1\): nothing; nothing was switched or restarted"):
        check_unit(path, 4.5, binary, Analyze(verify_rc=1), stamp)


def test_an_unreadable_rating_fails(unit: tuple[str, str, str]) -> None:
    path, binary, stamp = unit
    with pytest.raises(UnitCheckError, match=r"rates its exposure unreadable \(no rating\), expected at most"):
        check_unit(path, 4.5, binary, Analyze(score=""), stamp)
    assert not Path(stamp).exists()


def test_check_mode_checks_but_writes_no_record(unit: tuple[str, str, str]) -> None:
    path, binary, stamp = unit
    assert check_unit(path, 4.5, binary, Analyze(), stamp, record=False).cached is False
    assert not Path(stamp).exists()
    analyze = Analyze()
    check_unit(path, 4.5, binary, analyze, None)
    check_unit(path, 4.5, binary, analyze, None)
    assert len(analyze.calls) == 4  # without a stamp every call checks
