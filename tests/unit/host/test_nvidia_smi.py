"""nvidia-smi parsing and the GPU expectations, on outputs in the query's exact format."""

from __future__ import annotations

import pytest

from conftest import DATA
from sglang_sm120.host.nvidia_smi import (
    GpuExpectation,
    NvidiaSmiParseError,
    check_gpus,
    gpu_report,
    parse_query_output,
    version_tuple,
)

SMI = DATA / "nvidia-smi"
EXPECTED = GpuExpectation(count=8, name_pattern="RTX PRO 6000", compute_cap="12.0", min_driver="580.65.06")


def read(name: str) -> str:
    return (SMI / name).read_text()


def test_eight_rtx_pro_6000_pass_every_check():
    report = gpu_report(read("eight-rtx-pro-6000.txt"), EXPECTED)
    assert report.ok, report.problems
    assert [gpu.index for gpu in report.gpus] == list(range(8))
    first = report.gpus[0]
    assert first.name == "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    assert (first.compute_cap, first.driver_version, first.memory_mib) == ("12.0", "580.82.07", 97887)


def test_seven_gpus_says_found_seven_expected_eight():
    report = gpu_report(read("seven-gpus.txt"), EXPECTED)
    assert report.problems == ["found 7 GPUs, expected 8"]


def test_foreign_gpu_is_named_with_its_capability():
    problems = gpu_report(read("one-h100.txt"), EXPECTED).problems
    assert "GPU 7 is 'NVIDIA H100 80GB HBM3', expected a name matching 'RTX PRO 6000'" in problems
    assert "GPU 7 has compute capability 9.0, expected 12.0" in problems
    assert len(problems) == 2


def test_old_driver_is_reported_for_every_gpu():
    problems = gpu_report(read("old-driver.txt"), EXPECTED).problems
    assert len(problems) == 8
    assert problems[0] == "GPU 0 runs driver 570.133.20, expected 580.65.06 or newer (required by CUDA 13.0)"


def test_driver_comparison_is_numeric_not_textual():
    assert version_tuple("580.100.1") > version_tuple("580.65.06")
    gpus = parse_query_output("0, NVIDIA RTX PRO 6000 Blackwell, 12.0, 580.100.1, 97887 MiB\n")
    assert check_gpus(gpus, GpuExpectation(count=1)) == []


def test_not_available_field_is_a_parse_error_naming_the_line():
    with pytest.raises(NvidiaSmiParseError, match=r"line 5: compute capability should look like '12.0', found '\[N/A\]'"):
        parse_query_output(read("malformed-na.txt"))


def test_csv_header_is_refused():
    with pytest.raises(NvidiaSmiParseError, match="line 1: GPU index is not a number: 'index'"):
        parse_query_output(read("malformed-header.txt"))


def test_driver_failure_text_is_reported_not_crashed_on():
    report = gpu_report(read("driver-not-loaded.txt"), EXPECTED)
    assert not report.ok
    assert report.problems[0].startswith("cannot read nvidia-smi output: line 1: expected 5 comma-separated fields")


def test_empty_output_means_zero_gpus():
    assert gpu_report(read("empty.txt"), EXPECTED).problems == ["found 0 GPUs, expected 8"]


def test_host_without_nvidia_smi_says_why_and_what_was_expected():
    report = gpu_report(None, EXPECTED, "nvidia-smi not found on PATH")
    assert report.problems == ["cannot list GPUs: nvidia-smi not found on PATH; expected 8 GPUs"]


def test_mixed_drivers_are_reported():
    text = read("eight-rtx-pro-6000.txt").replace(
        "7, NVIDIA RTX PRO 6000 Blackwell Workstation Edition, 12.0, 580.82.07",
        "7, NVIDIA RTX PRO 6000 Blackwell Workstation Edition, 12.0, 580.95.05",
    )
    problems = gpu_report(text, EXPECTED).problems
    assert problems == ["GPUs report different drivers ['580.82.07', '580.95.05'], expected one"]
