"""The evidence table (plugins/module_utils/sglang_sm120/serve/evidence.py), read against the real SGLang wheels of every
release in its ranges; its verdicts on journals made of those releases' own format strings and on a
real SGLang 0.5.13 server's log (tests/data/real-server/0.5.13-h200/); sglang-evidence; the
host-side selection and redaction in bench_client.evidence()."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import BIN, CACHE, DATA
from sglang_sm120.serve import bench_client
from sglang_sm120.serve import evidence as se

VERSIONS = ("0.5.9", "0.5.10", "0.5.11", "0.5.13", "0.5.14", "0.5.15", "0.5.17", "0.5.19", "0.5.21", "0.5.23")
REAL = DATA / "real-server" / "0.5.13-h200"
EVIDENCE_CLI = BIN / "sglang-evidence"
ENTRIES: list[Any] = [*se.PATTERNS, *se.FIELDS, *se.MARKERS]
SECRET = "sk-test-0123456789abcdef"


@pytest.fixture(scope="session")
def wheels() -> dict[str, Path]:
    """The unpacked real SGLang wheels (`make sglang-wheels`), per release."""
    trees = {v: CACHE / "sglang" / v for v in VERSIONS}
    missing = [v for v, tree in trees.items() if not (tree / "sglang").is_dir()]
    if missing:
        pytest.fail(f"no unpacked SGLang {', '.join(missing)} under {CACHE / 'sglang'}: run `make sglang-wheels` first")
    return trees


def entry_id(entry: Any) -> str:
    what = getattr(entry, "name", None) or entry.kind
    return f"{what}:{getattr(entry, 'verdict', '-')}:{entry.min}-{entry.max}:{Path(entry.source).name}"


def covered(entry: Any) -> list[str]:
    return [v for v in VERSIONS if se._in_range(se.parse_version(v), entry.min, entry.max)]


def line(version: str, name: str, verdict: str, contains: str = "") -> str:
    """The line SGLang `version` prints for the first table entry of that optimisation and verdict (whose
    rendered text contains `contains`), with SGLang's log prefix."""
    for pattern in se.patterns_for(version):
        text = se.render(pattern.fragments, pattern.sample)
        if pattern.name == name and pattern.verdict == verdict and contains in text:
            return f"[2026-12-01 12:08:36] {text}"
    raise AssertionError(f"no {verdict} line for {name} in {version} containing {contains!r}")


def ready(version: str) -> str:
    marker = next(m for m in se.markers_for(version) if m.kind == "ready")
    return f"[2026-12-01 12:08:53] {se.render(marker.fragments)}"


def run_bin(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(EVIDENCE_CLI), *args], capture_output=True, text=True, check=False)


def verdicts(proc: subprocess.CompletedProcess) -> dict[str, dict]:
    assert proc.returncode == 0, proc.stderr
    return {o["name"]: o for o in json.loads(proc.stdout)["optimisations"]}


def write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------ the table against the real wheels


@pytest.mark.parametrize("entry", ENTRIES, ids=entry_id)
def test_every_entry_is_read_from_the_real_wheel_of_every_release_in_its_range(entry: Any, wheels: dict[str, Path]) -> None:
    versions = covered(entry)
    assert versions, f"{entry_id(entry)}: no cached release in its range, nothing checks it"
    for version in versions:
        path = wheels[version] / entry.source
        assert path.is_file(), f"SGLang {version} has no {entry.source}"
        text = path.read_text(encoding="utf-8")
        for fragment in (*entry.fragments, *getattr(entry, "context", ())):
            assert fragment in text, f"SGLang {version} {entry.source}: {fragment!r} not found (upstream wording changed?)"
    if isinstance(entry, (se.Pattern, se.Marker)):
        rendered = "[2026-12-01 12:08:36] " + se.render(entry.fragments, entry.sample)
        assert re.search(entry.regex, rendered), f"{entry.regex!r} does not match {rendered!r}"
        # The host-side keep-filter (bench_client, which cannot import the table) keeps the line.
        assert bench_client.EVIDENCE_LINE.search(rendered), rendered


def test_every_release_has_evidence_for_every_optimisation_and_no_entry_contradicts_another() -> None:
    for version in VERSIONS:
        names = {p.name for p in se.patterns_for(version)} | {f.name for f in se.fields_for(version)}
        assert names == set(se.OPTIMISATIONS), version
        yes = {p.name for p in se.patterns_for(version) if p.verdict == "yes"} | {
            f.name for f in se.fields_for(version) if f.verdict == "yes"
        }
        assert yes == set(se.OPTIMISATIONS) - {"torch symm-mem"}, version  # SGLang says nothing when symm-mem is on
        assert {m.kind for m in se.markers_for(version)} == {"server_args", "ready"}, version
    for a in se.PATTERNS:
        for b in se.PATTERNS:
            if a.name == b.name and a.verdict != b.verdict:
                assert not re.search(a.regex, se.render(b.fragments, b.sample)), (a.regex, b.fragments)
    assert all(p.verdict in ("yes", "no") and p.name in se.OPTIMISATIONS for p in se.PATTERNS)
    assert se.known("0.5.9") and se.known("0.5.12") and se.known("0.5.23") and not se.known("0.5.8") and not se.known("0.5.24")


def test_format_strings_render_as_python_prints_them() -> None:
    sample = {"rank": "0", "world_size": "8"}
    assert se.render(('f"FlashInfer workspace initialized for rank {rank}, "', 'f"world_size {world_size}"'), sample) == (
        "FlashInfer workspace initialized for rank 0, world_size 8"
    )
    assert se.render_literal('f"mem usage={(before_mem - after_mem):.2f} GB. {{x}}"') == "mem usage=1.00 GB. {x}"
    assert se.render_literal('"Device capability %s not supported, %d, %.2f, 100%%"', {"%s": "12"}) == (
        "Device capability 12 not supported, 1, 1.00, 100%"
    )
    assert se.render_literal('f"Capture {capture_name} CUDA graph end. ', {"capture_name": "target decode"}) == (
        "Capture target decode CUDA graph end. "
    )


# ------------------------------------------------------------------ verdicts on each release's own lines


def test_cuda_graphs_are_yes_on_0_5_9_and_0_5_23_capture_lines(tmp_path: Path) -> None:
    old = write(tmp_path, "old.log", [line("0.5.9", "cuda graphs", "yes", "Capture"), ready("0.5.9")])
    new = write(tmp_path, "new.log", [line("0.5.23", "cuda graphs", "yes", "Capture target"), ready("0.5.23")])
    assert "Capture cuda graph end. Time elapsed" in old.read_text()
    assert "Capture target verify CUDA graph end." in new.read_text()
    for path, version in ((old, "0.5.9"), (new, "0.5.23")):
        opts = verdicts(run_bin("--journal", str(path), "--sglang-version", version, "--json", "--"))
        assert opts["cuda graphs"]["verdict"] == "yes" and opts["cuda graphs"]["flag"] is None
        assert opts["cuda graphs"]["evidence"][0].startswith("server log: [2026-12-01 12:08:36] Capture")
    # The 0.5.23 wording read as 0.5.9 (and the reverse) is not evidence: the table is per version.
    assert verdicts(run_bin("--journal", str(new), "--sglang-version", "0.5.9", "--json", "--"))["cuda graphs"]["verdict"] == "unknown"
    off = verdicts(run_bin("--journal", str(old), "--sglang-version", "0.5.9", "--json", "--", "--disable-cuda-graph"))
    assert off["cuda graphs"]["verdict"] == "no" and off["cuda graphs"]["evidence"][0] == "flags: --disable-cuda-graph"


def test_mixed_chunk_is_no_on_0_5_9_with_eagle3(tmp_path: Path) -> None:
    journal = write(
        tmp_path,
        "eagle3.log",
        [
            line("0.5.9", "mixed chunk", "no", "eagle"),
            line("0.5.9", "cuda graphs", "yes", "Capture"),
            line("0.5.9", "speculative decoding", "yes", "Capture draft"),
            ready("0.5.9"),
        ],
    )
    assert "Mixed chunked prefill is disabled because of using eagle speculative decoding." in journal.read_text()
    flags = ("--speculative-algorithm", "EAGLE3", "--enable-mixed-chunk")
    opts = verdicts(run_bin("--journal", str(journal), "--sglang-version", "0.5.9", "--json", "--", *flags))
    assert opts["mixed chunk"]["verdict"] == "no" and "Mixed chunked prefill is disabled" in opts["mixed chunk"]["evidence"][0]
    assert opts["speculative decoding"]["verdict"] == "yes" and opts["speculative decoding"]["value"] == "EAGLE3"
    assert opts["cuda graphs"]["verdict"] == "yes"
    # 0.5.19+ keeps mixed chunk on with EAGLE3: the server says so only in /server_info.
    info = tmp_path / "info.json"
    info.write_text(json.dumps({"model_path": "/m", "version": "0.5.23", "enable_mixed_chunk": True, "speculative_algorithm": "EAGLE3"}))
    new = write(tmp_path, "new.log", [ready("0.5.23")])
    opts = verdicts(run_bin("--journal", str(new), "--server-info", str(info), "--sglang-version", "0.5.23", "--json", "--", *flags))
    assert opts["mixed chunk"]["verdict"] == "yes" and opts["mixed chunk"]["evidence"] == ["/server_info: enable_mixed_chunk=true"]


@pytest.mark.parametrize("version", ["0.5.9", "0.5.13", "0.5.23"])
def test_fusion_is_yes_on_its_workspace_line(version: str, tmp_path: Path) -> None:
    journal = write(tmp_path, "fusion.log", [line(version, "flashinfer allreduce fusion", "yes"), ready(version)])
    assert re.search(r"FlashInfer (workspace initialized for rank|AllReduce Fusion enabled)", journal.read_text())
    opts = verdicts(run_bin("--journal", str(journal), "--sglang-version", version, "--json", "--", "--enable-flashinfer-allreduce-fusion"))
    assert opts["flashinfer allreduce fusion"]["verdict"] == "yes"


def test_fusion_is_no_on_0_5_23s_sm90_sm10x_refusal(tmp_path: Path) -> None:
    refusal = line("0.5.23", "flashinfer allreduce fusion", "no", "SM90 or SM10X").split("] ", 1)[1]
    journal = write(
        tmp_path,
        "refused.log",
        ["[2026-12-01 12:07:35] Load weight begin. avail mem=94.97 GB", "Traceback (most recent call last):", f"ValueError: {refusal}"],
    )
    opts = verdicts(
        run_bin("--journal", str(journal), "--sglang-version", "0.5.23", "--json", "--", "--enable-flashinfer-allreduce-fusion")
    )
    fusion = opts["flashinfer allreduce fusion"]
    assert fusion["verdict"] == "no"
    assert fusion["evidence"] == ["server log: ValueError: FlashInfer allreduce fusion requires SM90 or SM10X NVIDIA GPUs."]


@pytest.mark.parametrize("contains", ["Device capability", "World size", "multicast"])
def test_symm_mem_is_no_on_its_not_supported_lines(contains: str, tmp_path: Path) -> None:
    for version in ("0.5.9", "0.5.23"):
        journal = write(tmp_path, "symm.log", [line(version, "torch symm-mem", "no", contains), ready(version)])
        opts = verdicts(run_bin("--journal", str(journal), "--sglang-version", version, "--json", "--", "--enable-torch-symm-mem"))
        assert opts["torch symm-mem"]["verdict"] == "no" and contains in opts["torch symm-mem"]["evidence"][0]


def test_symm_mem_is_unknown_otherwise_because_sglang_logs_nothing_when_it_is_on(tmp_path: Path) -> None:
    journal = write(tmp_path, "quiet.log", [line("0.5.13", "cuda graphs", "yes", "Capture"), ready("0.5.13")])
    info = tmp_path / "info.json"
    info.write_text(json.dumps({"model_path": "/m", "version": "0.5.13", "enable_torch_symm_mem": True, "tp_size": 8}))
    for extra in ([], ["--server-info", str(info)]):
        opts = verdicts(run_bin("--journal", str(journal), *extra, "--sglang-version", "0.5.13", "--json", "--", "--enable-torch-symm-mem"))
        symm = opts["torch symm-mem"]
        assert symm["verdict"] == "unknown" and symm["evidence"] == []
        assert "SGLang logs nothing when torch symm-mem all-reduce is on" in symm["note"]


def test_an_unknown_version_reads_nothing_and_says_which(tmp_path: Path) -> None:
    journal = write(tmp_path, "j.log", [line("0.5.23", "cuda graphs", "yes", "Capture target"), ready("0.5.23")])
    opts = verdicts(run_bin("--journal", str(journal), "--sglang-version", "0.5.24", "--json", "--", "--speculative-algorithm", "EAGLE3"))
    assert {o["verdict"] for o in opts.values()} == {"unknown"}
    assert all("SGLang 0.5.24 is outside the versions the evidence table knows (0.5.9 to 0.5.23)" in o["note"] for o in opts.values())
    results = se.judge(["--disable-cuda-graph"], [], None, "0.4.0")
    assert results[0]["verdict"] == "no" and results[0]["evidence"] == ["flags: --disable-cuda-graph"]  # the flags still count


# ------------------------------------------------------------------ a real SGLang 0.5.13 server


def test_the_real_0_5_13_eagle3_log_shows_cuda_graphs_and_speculative_decoding(tmp_path: Path) -> None:
    argv = (REAL / "argv-eagle3.txt").read_text().split()
    journal = str(REAL / "server-eagle3.log")
    opts = verdicts(run_bin("--journal", journal, "--sglang-version", "0.5.13", "--json", "--", *argv))
    assert set(opts) == {"cuda graphs", "speculative decoding"}
    graphs, spec = opts["cuda graphs"], opts["speculative decoding"]
    assert graphs["verdict"] == "yes" and graphs["flag"] == "--cuda-graph-max-bs" and graphs["value"] == "8"
    assert any("Capture cuda graph end. Time elapsed: 56.05 s." in e for e in graphs["evidence"])
    assert any(re.search(r"Decode batch.*cuda graph: True", e) for e in graphs["evidence"])
    assert spec["verdict"] == "yes" and any("Capture draft cuda graph end." in e for e in spec["evidence"])
    info = str(REAL / "ep-eagle3-get_server_info-after.txt")
    opts = verdicts(run_bin("--journal", journal, "--server-info", info, "--sglang-version", "0.5.13", "--json", "--", *argv))
    assert "/server_info: internal_states[0].avg_spec_accept_length=1.0" in opts["speculative decoding"]["evidence"]
    assert "/server_info: internal_states[0].memory_usage.graph=0.04" in opts["cuda graphs"]["evidence"]
    # Without /server_info, the server args SGLang logged at start stand in for it.
    assert se.server_args_from_log((REAL / "server-eagle3.log").read_text().splitlines())["speculative_algorithm"] == "EAGLE3"
    text = run_bin("--journal", journal, "--sglang-version", "0.5.13", "--", *argv)
    assert text.returncode == 0 and "cuda graphs (--cuda-graph-max-bs 8): yes\n" in text.stdout
    assert "speculative decoding (--speculative-algorithm EAGLE3): yes\n" in text.stdout


def test_start_up_lines_are_kept_after_500_traffic_lines(tmp_path: Path) -> None:
    real = (REAL / "server-eagle3.log").read_text().splitlines()
    decode = next(x for x in real if "Decode batch" in x)
    traffic = [decode.replace("#running-req: 1", f"#running-req: {i % 7}") for i in range(500)]
    whole = [*real, *traffic]
    kept = se.select_lines(whole, "0.5.13", tail=20)
    assert any("Capture cuda graph end" in x for x in kept) and any("Capture draft cuda graph end" in x for x in kept)
    assert any("server_args=ServerArgs(" in x for x in kept) and any("fired up and ready to roll" in x for x in kept)
    assert sum("Decode batch" in x for x in kept) == 20 and len(kept) < 30
    host = bench_client.evidence_lines(whole, max_lines=20)  # the host-side selection keeps them too
    assert any("Capture cuda graph end" in x for x in host) and sum("Decode batch" in x for x in host) == 20
    assert not any("Prefill batch" in x for x in host[host.index(next(x for x in host if "fired up" in x)) + 1 :])
    journal = write(tmp_path, "long.log", whole)
    opts = verdicts(run_bin("--journal", str(journal), "--sglang-version", "0.5.13", "--tail", "5", "--json", "--"))
    assert any("Capture cuda graph end" in e for e in opts["cuda graphs"]["evidence"])


# ------------------------------------------------------------------ sglang-evidence: shape, usage, bad input, keys


def test_the_json_shape(tmp_path: Path) -> None:
    journal = write(tmp_path, "j.log", [line("0.5.9", "cuda graphs", "yes", "Capture"), ready("0.5.9")])
    proc = run_bin("--journal", str(journal), "--sglang-version", "0.5.9", "--json", "--", "--enable-torch-symm-mem")
    data = json.loads(proc.stdout)
    assert set(data) == {"sglang_version", "optimisations"}
    assert [o["name"] for o in data["optimisations"]] == ["cuda graphs", "torch symm-mem"]
    for opt in data["optimisations"]:
        assert set(opt) == {"name", "flag", "value", "verdict", "evidence", "note"}
        assert opt["verdict"] in ("yes", "no", "unknown") and isinstance(opt["evidence"], list) and isinstance(opt["note"], str)


def bad_inputs(tmp_path: Path) -> list[tuple[list[str], str]]:
    good = write(tmp_path, "good.log", [ready("0.5.9")])
    empty = tmp_path / "empty.log"
    empty.write_text("")
    binary = tmp_path / "binary.log"
    binary.write_bytes(b"\x7fELF\x00\x01\x02")
    as_json = tmp_path / "evidence.json"
    as_json.write_text(json.dumps({"server_info": None, "log": []}))
    foreign = write(tmp_path, "nginx.log", ['127.0.0.1 - - [01/Dec/2026:12:00:00 +0000] "GET / HTTP/1.1" 200 612'])
    info_list = tmp_path / "list.json"
    info_list.write_text("[1, 2]")
    info_text = tmp_path / "info.txt"
    info_text.write_text("not json")
    info_foreign = tmp_path / "foreign.json"
    info_foreign.write_text(json.dumps({"status": "ok"}))
    info_other = tmp_path / "other.json"
    info_other.write_text(json.dumps({"model_path": "/m", "version": "0.5.23"}))
    j = ["--journal", str(good)]
    return [
        ([*j, "--sglang-version", "0.5.9"], "give the server's launch flags after --"),
        (
            ["--journal", str(tmp_path / "absent.log"), "--sglang-version", "0.5.9", "--"],
            f"journal {tmp_path / 'absent.log'}: No such file",
        ),
        (["--journal", str(empty), "--sglang-version", "0.5.9", "--"], f"journal {empty} is empty: expected SGLang's log"),
        (["--journal", str(binary), "--sglang-version", "0.5.9", "--"], f"journal {binary} is binary (NUL bytes): expected SGLang's log"),
        (
            ["--journal", str(as_json), "--sglang-version", "0.5.9", "--"],
            f"journal {as_json} is JSON (dict), not a log: expected SGLang's log",
        ),
        (["--journal", str(foreign), "--sglang-version", "0.5.9", "--"], f"journal {foreign}: no line in SGLang's log format (1 lines"),
        ([*j, "--server-info", str(info_list), "--sglang-version", "0.5.9", "--"], f"server info {info_list}: expected a JSON object"),
        ([*j, "--server-info", str(info_text), "--sglang-version", "0.5.9", "--"], f"server info {info_text} is not JSON"),
        (
            [*j, "--server-info", str(info_foreign), "--sglang-version", "0.5.9", "--"],
            f"server info {info_foreign}: no model_path or version: expected SGLang's /server_info fields (server args, version), "
            "found keys: status",
        ),
        (
            [*j, "--server-info", str(info_other), "--sglang-version", "0.5.9", "--"],
            f"server info {info_other} is from SGLang 0.5.23, --sglang-version says 0.5.9",
        ),
        ([*j, "--sglang-version", "latest", "--"], "--sglang-version takes a release like 0.5.9 (MAJOR.MINOR.PATCH), found 'latest'"),
        (["--sglang-version", "0.5.9", "--"], "the following arguments are required: --journal"),
    ]


def test_bad_usage_and_bad_input_exit_2_naming_the_file_and_what_was_expected(tmp_path: Path) -> None:
    for args, message in bad_inputs(tmp_path):
        proc = run_bin(*args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert proc.stderr.startswith("sglang-evidence: ") and message in proc.stderr, (message, proc.stderr)
        assert proc.stdout == ""


def test_an_api_key_is_never_printed_nor_kept(tmp_path: Path) -> None:
    args_line = (
        f"[2026-12-01 12:07:10] server_args=ServerArgs(model_path='/m', api_key='{SECRET}', admin_api_key='{SECRET}', "
        "disable_cuda_graph=False, enable_mixed_chunk=False, speculative_algorithm='EAGLE3', tp_size=8)"
    )
    dict_line = f"[2026-12-01 12:07:10] server_args={{'model_path': '/m', 'api_key': '{SECRET}', 'disable_cuda_graph': False}}"
    journal = write(tmp_path, "keys.log", [args_line, dict_line, f"launching with --api-key {SECRET}", ready("0.5.9")])
    info = {
        "model_path": "/m",
        "version": "0.5.9",
        "api_key": SECRET,
        "admin_api_key": SECRET,
        "hf_token": SECRET,
        "ssl_keyfile_password": None,
        "launch_command": f"python -m sglang.launch_server --api-key={SECRET} --tp-size 8",
        "internal_states": [{"api_key": SECRET, "avg_spec_accept_length": 2.5}],
        "decode": [{"model_path": "/m", "version": "0.5.9", "admin_api_key": SECRET, "speculative_algorithm": "EAGLE3"}],
    }
    path = tmp_path / "info.json"
    path.write_text(json.dumps(info))
    for extra in ([], ["--server-info", str(path)], ["--json"], ["--json", "--server-info", str(path)]):
        proc = run_bin("--journal", str(journal), *extra, "--sglang-version", "0.5.9", "--", "--enable-mixed-chunk")
        assert proc.returncode == 0, proc.stderr
        assert SECRET not in proc.stdout + proc.stderr
    redacted = se.redact(info)
    assert SECRET not in json.dumps(redacted) and redacted["api_key"] == "<redacted>" and redacted["ssl_keyfile_password"] is None
    assert redacted["internal_states"][0] == {"api_key": "<redacted>", "avg_spec_accept_length": 2.5}
    assert redacted["decode"][0]["admin_api_key"] == "<redacted>" and redacted["model_path"] == "/m"
    assert redacted["launch_command"] == "python -m sglang.launch_server --api-key=<redacted> --tp-size 8"
    assert bench_client.redact(info) == redacted  # the host-side copy redacts the same
    kept = se.select_lines([args_line, dict_line], "0.5.9")
    assert len(kept) == 2 and SECRET not in "".join(kept) and "api_key='<redacted>'" in kept[0] and "'api_key': '<redacted>'" in kept[1]
    assert se.server_args_from_log(kept)["enable_mixed_chunk"] is False  # still read after redaction


# ------------------------------------------------------------------ the judge's rules


def test_negative_evidence_wins_and_the_note_says_what_was_missing() -> None:
    log = [line("0.5.9", "cuda graphs", "yes", "Capture"), line("0.5.9", "cuda graphs", "no")]
    graphs = se.judge([], log, None, "0.5.9")[0]
    assert graphs["verdict"] == "no" and graphs["evidence"][0].startswith("server log: [2026-12-01 12:08:36] Cuda graph is disabled")
    assert graphs["note"].startswith("negative evidence wins; also seen: server log:")
    nothing = {
        r["name"]: r for r in se.judge(["--speculative-algorithm", "EAGLE3", "--enable-flashinfer-allreduce-fusion"], [], None, "0.5.9")
    }
    assert nothing["speculative decoding"]["verdict"] == "unknown"
    assert nothing["speculative decoding"]["note"].startswith("nothing seen: looked for the draft model's CUDA graphs captured")
    assert "no /server_info answer was recorded" in nothing["speculative decoding"]["note"]
    assert "only on SM90/SM100" in nothing["flashinfer allreduce fusion"]["note"]
    warned = se.judge(
        ["--enable-flashinfer-allreduce-fusion"], [], None, "0.5.9", ["--enable-flashinfer-allreduce-fusion is a no-op on ..."]
    )
    assert warned[1]["verdict"] == "no" and warned[1]["evidence"][0].startswith(
        "flag check: --enable-flashinfer-allreduce-fusion is a no-op"
    )


def test_server_info_decides_per_version_and_unasked_optimisations_show_only_when_on() -> None:
    info = {"speculative_algorithm": "EAGLE3", "internal_states": [{"memory_usage": {"graph": {"decode": 0.0, "target_verify": 1.5}}}]}
    results = {r["name"]: r for r in se.judge(["--speculative-algorithm", "EAGLE3"], [], info, "0.5.23")}
    assert results["cuda graphs"]["verdict"] == "yes"
    assert results["speculative decoding"]["verdict"] == "unknown" and "no accept length yet" in results["speculative decoding"]["note"]
    off = {"cuda_graph_config": {"decode": {"backend": "disabled"}}, "speculative_algorithm": None, "internal_states": [{}]}
    results = {r["name"]: r for r in se.judge(["--speculative-algorithm", "EAGLE3"], [], {"decode": [off]}, "0.5.23")}
    assert results["cuda graphs"]["evidence"] == ['/server_info: cuda_graph_config.decode.backend="disabled"']
    assert results["speculative decoding"]["evidence"] == ["/server_info: speculative_algorithm=null"]
    assert se.judge([], [], off, "0.5.13")[0]["verdict"] == "unknown"  # no cuda_graph_config before 0.5.14
    # Not asked for, but the server shows it on: listed; not asked for and not shown: left out.
    auto = [line("0.5.9", "flashinfer allreduce fusion", "yes")]
    assert [r["name"] for r in se.judge([], auto, {"speculative_algorithm": None}, "0.5.9")] == [
        "cuda graphs",
        "flashinfer allreduce fusion",
    ]
    assert se.findings(se.judge(["--enable-mixed-chunk"], [line("0.5.9", "mixed chunk", "no", "eagle")], None, "0.5.9")) == [
        {
            "name": "mixed chunk",
            "meaning": "mixed chunk off at start: server log: [2026-12-01 12:08:36] Mixed chunked prefill is disabled because of using "
            "eagle speculative decoding.",
            "line": "[2026-12-01 12:08:36] Mixed chunked prefill is disabled because of using eagle speculative decoding.",
        }
    ]


# ------------------------------------------------------------------ bench_client.evidence() on the host


def test_the_client_reads_server_info_first_then_get_server_info_and_redacts(monkeypatch: pytest.MonkeyPatch) -> None:
    answers: dict[str, Any] = {"/server_info": None, "/get_server_info": json.dumps({"model_path": "/m", "api_key": SECRET})}
    asked: list[str] = []

    def fake_get(url: str, path: str, api_key: Any, timeout: float = 10.0) -> Any:
        asked.append(path)
        return answers[path]

    real = (REAL / "server-eagle3.log").read_text().splitlines()
    journal = "\n".join([*real, *[x for x in real if "Decode batch" in x] * 100])

    def fake_run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
        out = "abc123\n" if cmd[0] == "systemctl" else journal
        return subprocess.CompletedProcess(cmd, 0, out, "")

    monkeypatch.setattr(bench_client, "_get", fake_get)
    monkeypatch.setattr(bench_client.subprocess, "run", fake_run)
    out = bench_client.evidence("http://127.0.0.1:30000", "sglang.service", None, max_lines=10)
    assert asked == ["/server_info", "/get_server_info"] and out["server_info_endpoint"] == "/get_server_info"
    assert out["server_info"] == {"model_path": "/m", "api_key": "<redacted>"} and out["error"] == ""
    assert {"url", "unit", "server_info", "log", "error"} <= set(out) and out["journal_lines"] > 500
    assert any("Capture cuda graph end" in x for x in out["log"]) and sum("Decode batch" in x for x in out["log"]) == 10
    answers["/server_info"] = json.dumps({"model_path": "/m"})
    asked.clear()
    assert bench_client.evidence("http://127.0.0.1:30000", None, None)["server_info_endpoint"] == "/server_info" and asked == [
        "/server_info"
    ]
    answers["/server_info"] = answers["/get_server_info"] = None
    assert bench_client.evidence("http://127.0.0.1:30000", None, None)["error"] == (
        "GET http://127.0.0.1:30000/server_info and /get_server_info did not answer 200"
    )
