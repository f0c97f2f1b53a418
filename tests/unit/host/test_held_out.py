"""The held-out measure (tests/data/start-failures/held-out.yml, issue 48 item 4): start failures users
reported, split off by a fixed rule before the gate was run on them, and never read to write an entry.
Each reproducible held-out report is evaluated in-process on the catalogue as it stands (flags as typed,
the real 0.5.23 flag table, the real model configs of tests/data) and its recorded verdict is asserted:
a change that loses a catch fails here, and so does one that gains a catch the file still calls missed
(then update held-out.yml and its counts). Fast: the flag tables are read once from the unpacked trees."""

from __future__ import annotations

import pytest
import yaml

from conftest import DATA, unpacked_sglang
from sglang_sm120.launch.flags import _lookup, release_flag_table
from sglang_sm120.launch.invariants import read_release_data
from sglang_sm120.launch.start_failures import Context, evaluate, parse_argv, read_model_dir
from sglang_sm120_controller.toolkit_data import load_catalogue

HELD_OUT = DATA / "start-failures" / "held-out.yml"
KIMI = DATA / "models" / "kimi-k2.5-nvfp4"


tree = unpacked_sglang


@pytest.fixture(scope="module")
def record() -> dict:
    return yaml.safe_load(HELD_OUT.read_text())


@pytest.fixture(scope="module")
def aliases_0523() -> dict[str, str]:
    return {name: flag.name for name, flag in _lookup(release_flag_table(tree("0.5.23"))).items()}


def held_out(record: dict, url: str) -> dict:
    (report,) = [r for r in record["reports"] if r["url"] == url]
    assert report["held_out"], f"{url} is not held out"
    return report


def test_the_split_follows_the_written_rule(record: dict) -> None:
    reports = record["reports"]
    urls = [r["url"] for r in reports]
    assert urls == sorted(urls)
    assert [r["index"] for r in reports] == list(range(1, len(reports) + 1))
    assert [r["held_out"] for r in reports] == [r["index"] % 3 == 0 for r in reports]


def test_the_counts_match_the_reports(record: dict) -> None:
    held = [r for r in record["reports"] if r["held_out"]]
    verdicts = [r["gate"]["verdict"] for r in held]
    assert record["counts"] == {
        "harvested": len(record["reports"]),
        "held_out": len(held),
        "caught": verdicts.count("caught"),
        # caught by an entry written without reading the report: the measure the issue asks for
        "caught_blind": sum(1 for r in held if r["gate"]["verdict"] == "caught" and r["gate"].get("blind", True)),
        "missed": verdicts.count("missed"),
        "out_of_reach": verdicts.count("out of reach"),
    }
    assert all(r["gate"]["entry"] for r in held if r["gate"]["verdict"] == "caught")


def test_flashinfer_trtllm_with_deepep_is_caught_now_but_not_blind(record: dict, aliases_0523: dict[str, str]) -> None:
    """sglang #24502: --moe-runner-backend flashinfer_trtllm with --moe-a2a-backend deepep raises in
    MoeRunner.__init__ (0.5.9-0.5.23). Missed when it was held out; caught since moe-runner-backend-refused-by-moerunner
    (read from runner.py and the fused-function registry of every release) -- written after this record's note had
    been read, so it does not count as a blind catch (`blind: false`, counts.caught_blind)."""
    report = held_out(record, "https://github.com/sgl-project/sglang/issues/24502")
    assert report["gate"]["verdict"] == "caught" and report["gate"]["blind"] is False
    assert report["gate"]["verdict_when_held_out"] == "missed"
    argv = [
        "--model-path", str(KIMI), "--tp-size", "8", "--ep-size", "8", "--quantization", "modelopt_fp4",
        "--moe-runner-backend", "flashinfer_trtllm", "--moe-a2a-backend", "deepep", "--deepep-mode", "auto",
    ]  # fmt: skip
    ctx = Context(
        flags=parse_argv(argv, aliases_0523),
        env={},
        version="0.5.23",
        capability="10.3",
        model=read_model_dir(KIMI),
        aliases=aliases_0523,
        release=read_release_data(tree("0.5.23")),  # the gate reads the release's sources where it has the model
    )
    fired = [(v.id, v.verdict) for v in evaluate(load_catalogue(), ctx) if v.verdict in ("refused", "warning")]
    assert fired == [(report["gate"]["entry"], "refused")], fired


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_pcie_oneshot_allreduce_is_no_flag_of_an_upstream_release(record: dict, version: str) -> None:
    """rtx6kpro sglang.md#L148: --enable-pcie-oneshot-allreduce (with expandable_segments) crashes in the
    operators' patched build. Out of reach for the catalogue; upstream releases do not know the flag, so
    the gate refuses that command line before any load (SGLang's own parser, not an entry)."""
    report = held_out(record, "https://github.com/voipmonitor/rtx6kpro/blob/29f3863/inference-engines/sglang.md#L148")
    assert report["gate"]["verdict"] == "out of reach"
    table = _lookup(release_flag_table(tree(version)))
    assert "moe-a2a-backend" in table  # the table is read and keyed as SGLang names its flags
    assert "--enable-pcie-oneshot-allreduce" not in table and "enable-pcie-oneshot-allreduce" not in table
