"""launch/placement.py: the GPUs SGLang's ranks use, the one rule the start gate, the fabric check and the canary share."""

from __future__ import annotations

import pytest

from sglang_sm120.launch.placement import PlacementError, flag_value, gpus, sizes_of


@pytest.mark.parametrize(
    ("argv", "used"),
    [
        ([], [0]),
        (["--tp-size", "8"], list(range(8))),
        (["--tp", "4", "--pp-size", "2"], list(range(8))),
        (["--tp-size=2", "--dp-size", "2"], [0, 1, 2, 3]),
        # dp attention runs the dp groups inside the tp ranks
        (["--tp-size", "4", "--dp-size", "4", "--enable-dp-attention"], [0, 1, 2, 3]),
        (["--tp-size", "2", "--base-gpu-id", "4"], [4, 5]),
        (["--tp-size", "2", "--gpu-id-step", "2"], [0, 2]),
        # two nodes split tp 8: four ranks here
        (["--tp-size", "8", "--nnodes", "2"], [0, 1, 2, 3]),
        (["--tp-size", "2", "--tp-size", "8"], list(range(8))),  # argparse keeps the last
    ],
)
def test_the_gpus_sglang_places_ranks_on(argv: list[str], used: list[int]) -> None:
    assert gpus(**sizes_of(argv)) == used


def test_a_placing_flag_that_is_not_a_count_is_refused_by_name() -> None:
    with pytest.raises(PlacementError, match="--tp-size must be a whole number, found 'eight'"):
        sizes_of(["--tensor-parallel-size", "eight"])
    with pytest.raises(PlacementError, match="--base-gpu-id must be at least 0, found -1"):
        sizes_of(["--base-gpu-id=-1"])
    assert sizes_of(["--base-gpu-id", "0"]) == {"base": 0, "dp_attention": False}
    assert gpus() == [0]  # SGLang's defaults: one GPU


def test_flag_value_reads_both_spellings_and_the_last() -> None:
    assert flag_value(["--port", "1", "--port=2"], ("--port",)) == "2"
    assert flag_value(["--port"], ("--port",)) is None
    assert flag_value(["--portx", "1"], ("--port",)) is None
