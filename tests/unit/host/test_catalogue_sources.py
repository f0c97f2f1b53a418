"""The version ranges of the start-failure catalogue (roles/sglang_launch/files/start-failures.yml), proven on SGLang's
own sources: for an entry listed in PROBES, a probe reads the code that makes the failure (or its
guard) in each unpacked release of tests/data/sglang-wheels.txt (every release from 0.5.9 to 0.5.23,
post releases included) and says whether that release is affected; the entry's range must hold
exactly those releases. A probe reads the code, it does not grep for a version number: when a new
release moves the code, the probe fails loudly (ProbeError) instead of guessing.

An entry whose range cannot be read from source (a kernel's behaviour on a GPU, a driver) is named in
NOT_FROM_SOURCE with the reason; every ranged entry is in one of the two (test_every_ranged_entry_is_proven_or_says_why).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import CACHE, DATA
from sglang_sm120.launch.start_failures import version_tuple
from sglang_sm120_controller.toolkit_data import load_catalogue

ENTRIES = {e.id: e for e in load_catalogue()}
RELEASES = [line.split()[0] for line in (DATA / "sglang-wheels.txt").read_text().splitlines() if line.strip() and not line.startswith("#")]


class ProbeError(AssertionError):
    """The code a probe reads is not where, or not what, the probe expects: read the release again."""


def source(version: str, relative: str) -> str:
    path = CACHE / "sglang" / version / "sglang" / relative
    if not (CACHE / "sglang" / version / "sglang").is_dir():
        pytest.fail(f"no unpacked SGLang {version} under {CACHE / 'sglang'}: run `make sglang-wheels` first")
    if not path.is_file():
        raise ProbeError(f"SGLang {version}: {relative} is not there")
    return path.read_text(encoding="utf-8")


def method(text: str, cls: str, name: str, where: str) -> str:
    """The source of method `name` of class `cls` in `text` (ProbeError when either is missing)."""
    tree = ast.parse(text)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return ast.get_source_segment(text, item) or ""
            raise ProbeError(f"{where}: class {cls} has no method {name}")
    raise ProbeError(f"{where}: no class {cls}")


def nvfp4_moe_auto_is_trtllm(version: str) -> bool:
    """Affected: ModelOptNvFp4FusedMoEMethod.create_moe_runner turns an auto MoE runner into
    FLASHINFER_TRTLLM (off SM80-SM90) and apply() has no cutlass_moe_fp4 fallback left for it."""
    where = f"SGLang {version} srt/layers/quantization/modelopt_quant.py"
    text = source(version, "srt/layers/quantization/modelopt_quant.py")
    create = method(text, "ModelOptNvFp4FusedMoEMethod", "create_moe_runner", where)
    apply = method(text, "ModelOptNvFp4FusedMoEMethod", "apply", where)
    auto_to_trtllm = "is_auto()" in create and "moe_runner_backend = MoeRunnerBackend.FLASHINFER_TRTLLM" in create
    falls_back = "cutlass_moe_fp4(" in apply
    return auto_to_trtllm and not falls_back


def deepgemm_on_for_sm120(version: str) -> bool:
    """Affected: deep_gemm_wrapper/configurer.py enables the DeepGEMM JIT on SM120 whenever it is
    importable (no guard for sm_version 120; from 0.5.21 the guard keeps it off unless the installed
    deep_gemm has the SM120 entry points, which is upstream's own SM120 support)."""
    text = source(version, "srt/layers/deep_gemm_wrapper/configurer.py")
    if "SGLANG_ENABLE_JIT_DEEPGEMM" not in text:
        raise ProbeError(f"SGLang {version} configurer.py no longer reads SGLANG_ENABLE_JIT_DEEPGEMM")
    return "sm_version == 120" not in text and "sm_version in (120, 121)" not in text


def function(text: str, name: str, where: str) -> ast.FunctionDef:
    """The module-level function `name` in `text` (ProbeError when it is missing)."""
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise ProbeError(f"{where}: no function {name}")


def method_node(text: str, cls: str, name: str, where: str) -> ast.FunctionDef:
    """The ast node of method `name` of class `cls` in `text` (ProbeError when either is missing)."""
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item
            raise ProbeError(f"{where}: class {cls} has no method {name}")
    raise ProbeError(f"{where}: no class {cls}")


def statements(node: ast.FunctionDef) -> list[ast.stmt]:
    """The body of a function without its docstring."""
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        return body[1:]
    return body


def raises_with(node: ast.AST, words: str) -> bool:
    """Whether `node` holds a raise whose source contains `words`."""
    return any(isinstance(n, ast.Raise) and words in ast.unparse(n) for n in ast.walk(node))


def capability_majors(version: str, name: str) -> list[int]:
    """The device_capability_majors that utils/common.py gives `name` (is_blackwell_supported = partial(..., majors))."""
    text = source(version, "srt/utils/common.py")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            for call in ast.walk(node.value):
                for keyword in getattr(call, "keywords", []):
                    if keyword.arg == "device_capability_majors":
                        return list(ast.literal_eval(keyword.value))
    raise ProbeError(f"SGLang {version} srt/utils/common.py: no {name} with device_capability_majors")


def trtllm_mla_admits_sm120(version: str) -> bool:
    """Affected: the only capability check on --attention-backend/--decode-attention-backend trtllm_mla
    (ServerArgs, from 0.5.15 arg_groups/overrides.py) rejects what is not is_blackwell_supported, whose
    majors include 12: SGLang lets it through and FlashInfer's kernel fails at the first MLA prefill."""
    message = "TRTLLM MLA backend is only supported on Blackwell"
    for relative in ("srt/server_args.py", "srt/arg_groups/overrides.py"):
        path = CACHE / "sglang" / version / "sglang" / relative
        if not path.is_file() or message not in path.read_text(encoding="utf-8"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        guards = [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.If) and any(isinstance(s, ast.Raise) and message in ast.unparse(s) for s in n.body)
        ]
        tests = {ast.unparse(n.test) for n in guards}
        if not tests <= {"not is_blackwell_supported()", "not is_blackwell()", "not get_platform().is_blackwell"} or not tests:
            raise ProbeError(f"SGLang {version} {relative}: the trtllm_mla guard reads {tests}")
        return 12 in capability_majors(version, "is_blackwell_supported")
    raise ProbeError(f"SGLang {version}: no trtllm_mla capability guard in server_args.py or arg_groups/overrides.py")


def fa3_rejects_sm120(version: str) -> bool:
    """Affected: create_flashattention_v3_backend (attention_registry.py) asserts major 8 (non-MLA) or
    9 when the backend is created, which capability 12 fails."""
    where = f"SGLang {version} srt/layers/attention/attention_registry.py"
    create = function(source(version, "srt/layers/attention/attention_registry.py"), "create_flashattention_v3_backend", where)
    asserts = [ast.unparse(n.test) for n in ast.walk(create) if isinstance(n, ast.Assert) and "SM>=80 and SM<=90" in ast.unparse(n)]
    if not asserts:
        raise ProbeError(f"{where}: create_flashattention_v3_backend asserts no SM80/SM90")
    return all("== 9" in test and "12" not in test for test in asserts)


def draft_inherits_target_backend(version: str) -> bool:
    """Affected: DraftBackendFactory._create_backend (speculative/draft_utils.py) gives the draft the
    target's attention backend unless --speculative-draft-attention-backend is set, whatever the draft's
    attention is (nothing reads whether the draft is MLA)."""
    where = f"SGLang {version} srt/speculative/draft_utils.py"
    create = method(source(version, "srt/speculative/draft_utils.py"), "DraftBackendFactory", "_create_backend", where)
    if "self.draft_attn_backend" not in create:
        raise ProbeError(f"{where}: _create_backend no longer reads the draft's own backend")
    inherits = "self.server_args.attention_backend" in create or "attention_backends()" in create
    return inherits and "mla" not in create.lower()


def fusion_flag_becomes_backend(version: str) -> bool:
    """Whether --enable-flashinfer-allreduce-fusion (deprecated from 0.5.14) is turned into
    flashinfer_allreduce_fusion_backend = "auto" (server_args.py, from 0.5.18 arg_groups/serving_hook.py)."""
    for relative in ("srt/server_args.py", "srt/arg_groups/serving_hook.py"):
        path = CACHE / "sglang" / version / "sglang" / relative
        if not path.is_file():
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.If):
                test, body = ast.unparse(node.test), "\n".join(ast.unparse(n) for n in node.body)
                reads_flag = "enable_flashinfer_allreduce_fusion" in test and "flashinfer_allreduce_fusion_backend is None" in test
                if reads_flag and "flashinfer_allreduce_fusion_backend" in body and "'auto'" in body:
                    return True
    return False


def allreduce_fusion_raises(version: str) -> bool:
    """Affected: the flag becomes the "auto" fusion backend, and the workspace set-up before CUDA graph
    capture (ensure_workspace_initialized) resolves it through _resolve_backend, which raises
    "requires SM90 or SM10X" first thing off SM90/SM100 (layers/flashinfer_comm_fusion.py)."""
    if not fusion_flag_becomes_backend(version):
        return False
    where = f"SGLang {version} srt/layers/flashinfer_comm_fusion.py"
    text = source(version, "srt/layers/flashinfer_comm_fusion.py")
    first = statements(function(text, "_resolve_backend", where))[0]
    test = ast.unparse(first.test) if isinstance(first, ast.If) else ""
    if not (test.startswith("not (") and "sm90" in test and "sm100" in test and raises_with(first, "requires SM90 or SM10X")):
        raise ProbeError(f"{where}: _resolve_backend does not start with the SM90/SM10X check")
    ensure = ast.unparse(function(text, "ensure_workspace_initialized", where))
    warmup = source(version, "srt/model_executor/runner/base_runner.py")
    return "resolve_flashinfer_allreduce_fusion_backend(" in ensure and "pre_initialize_workspaces(" in warmup


def allreduce_fusion_noop(version: str) -> bool:
    """Affected: the flag is read only by communicator.py apply_flashinfer_allreduce_fusion, which
    is gated to SM90/SM100, so on capability 12 it is accepted and ignored (until 0.5.13)."""
    if fusion_flag_becomes_backend(version):
        return False
    where = f"SGLang {version} srt/layers/communicator.py"
    gate = ast.unparse(function(source(version, "srt/layers/communicator.py"), "apply_flashinfer_allreduce_fusion", where))
    if "enable_flashinfer_allreduce_fusion" not in gate:
        raise ProbeError(f"{where}: apply_flashinfer_allreduce_fusion does not read the flag")
    return "(_is_sm90_supported or _is_sm100_supported)" in gate and "sm120" not in gate


def symm_mem_table_majors(version: str) -> set[int]:
    """The capability majors of TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES (device_communicators/all_reduce_utils.py)."""
    text = source(version, "srt/distributed/device_communicators/all_reduce_utils.py")
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES" for t in node.targets
        ):
            if not isinstance(node.value, ast.Dict):
                break
            return {ast.literal_eval(key) for key in node.value.keys if key is not None}
    raise ProbeError(f"SGLang {version} all_reduce_utils.py: no TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES table")


def symm_mem_init(version: str) -> ast.FunctionDef:
    where = f"SGLang {version} srt/distributed/device_communicators/torch_symm_mem.py"
    return method_node(
        source(version, "srt/distributed/device_communicators/torch_symm_mem.py"), "TorchSymmMemCommunicator", "__init__", where
    )


def torch_symm_mem_keyerror(version: str) -> bool:
    """Affected: TorchSymmMemCommunicator.__init__ indexes TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES[capability
    major] with [] (from 0.5.14 .get(), None -> "not supported"), and the table has no key 12."""
    init = symm_mem_init(version)
    lookups = [
        ast.unparse(n)
        for n in ast.walk(init)
        if "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES" in ast.unparse(n) and "device_capability" in ast.unparse(n)
    ]
    subscript = any(
        isinstance(n, ast.Subscript) and ast.unparse(n) == "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES[self.device_capability]"
        for n in ast.walk(init)
    )
    if not lookups:
        raise ProbeError(f"SGLang {version} TorchSymmMemCommunicator.__init__ no longer looks the capability up in its size table")
    return subscript and 12 not in symm_mem_table_majors(version)


def torch_symm_mem_inactive(version: str) -> bool:
    """Affected: on capability 12 the communicator never turns on, through the size table (no key 12:
    KeyError to 0.5.13, "Device capability 12 not supported" from 0.5.14) or, were 12 there, through
    __init__ disabling itself when the rendezvous has no multicast (multicast_ptr == 0: no NVSwitch)."""
    init = ast.unparse(symm_mem_init(version))
    if "multicast_ptr == 0" not in init:
        raise ProbeError(f"SGLang {version} TorchSymmMemCommunicator.__init__ no longer checks multicast_ptr")
    return 12 not in symm_mem_table_majors(version) or "self.disabled = True" in init


def custom_all_reduce_v2_crashes_on_pcie(version: str) -> bool:
    """Affected: dispatch_custom_allreduce (custom_all_reduce.py) returns CustomAllReduceV2 with no NVLink
    check (from 0.5.13 can_use_custom_all_reduce_v2 falls back to v1), its __init__ returns disabled
    before creating self.obj when not full NVLink, and its capture() (entered at CUDA graph capture)
    calls self.obj without first returning for a disabled instance (that guard is in from 0.5.12)."""
    where = f"SGLang {version} srt/distributed/device_communicators/custom_all_reduce.py"
    dispatch = ast.unparse(
        function(source(version, "srt/distributed/device_communicators/custom_all_reduce.py"), "dispatch_custom_allreduce", where)
    )
    if "CustomAllReduceV2" not in dispatch:
        return False
    if "can_use_custom_all_reduce_v2" in dispatch:
        return False
    v2 = source(version, "srt/distributed/device_communicators/custom_all_reduce_v2.py")
    where = f"SGLang {version} custom_all_reduce_v2.py"
    init = ast.unparse(method_node(v2, "CustomAllReduceV2", "__init__", where))
    if "full_nvlink" not in init or "self.disabled = True" not in init:
        raise ProbeError(f"{where}: CustomAllReduceV2.__init__ no longer disables itself without full NVLink")
    capture = method_node(v2, "CustomAllReduceV2", "capture", where)
    first = statements(capture)[0]
    returns_when_disabled = isinstance(first, ast.If) and ast.unparse(first.test) == "self.disabled"
    return "self.obj.set_cuda_graph_capture" in ast.unparse(capture) and not returns_when_disabled


def pcie_ipc_allreduce_read(version: str) -> bool:
    """Affected: the release reads SGLANG_ENABLE_PCIE_IPC_ALLREDUCE (environ.py) and builds FlashInfer's
    PcieIpcAllReduceWorkspace for it (device_communicators/pcie_ipc_ar.py); before 0.5.21 the variable is
    read nowhere."""
    if "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE" not in source(version, "srt/environ.py"):
        return False
    where = f"SGLANG {version} srt/distributed/device_communicators/pcie_ipc_ar.py"
    text = source(version, "srt/distributed/device_communicators/pcie_ipc_ar.py")
    eligible = ast.unparse(function(text, "eligible_group", where))
    return "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE" in eligible and "PcieIpcAllReduceWorkspace" in text


def modelopt_read_as_fp8(version: str) -> bool:
    """Affected: ModelConfig._parse_quant_hf_config keeps config.json's quant_method "modelopt" as written
    (no quant_algo lookup for it) and the method table maps "modelopt" to ModelOptFp8Config."""
    where = f"SGLang {version} srt/configs/model_config.py"
    parse = method(source(version, "srt/configs/model_config.py"), "ModelConfig", "_parse_quant_hf_config", where)
    table = source(version, "srt/layers/quantization/__init__.py")
    if '"modelopt": ModelOptFp8Config' not in table:
        raise ProbeError(f"SGLang {version} srt/layers/quantization/__init__.py no longer maps modelopt to ModelOptFp8Config")
    return '== "modelopt"' not in parse


def fp4_gemm_env_picks_trtllm(version: str) -> bool:
    """Affected: the release still reads SGLANG_FLASHINFER_FP4_GEMM_BACKEND, in fp4_utils'
    initialize_fp4_gemm_config, taking its value (trtllm made flashinfer_trtllm) when the FP4 GEMM
    backend is auto; ServerArgs' own default must be flashinfer_cutlass (the entry's `default`)."""
    srt = CACHE / "sglang" / version / "sglang" / "srt"
    readers = [p for p in srt.rglob("*.py") if "SGLANG_FLASHINFER_FP4_GEMM_BACKEND" in p.read_text(encoding="utf-8", errors="replace")]
    if not readers:
        return False
    where = f"SGLang {version} srt/layers/quantization/fp4_utils.py"
    init = ast.unparse(function(source(version, "srt/layers/quantization/fp4_utils.py"), "initialize_fp4_gemm_config", where))
    if not ("SGLANG_FLASHINFER_FP4_GEMM_BACKEND" in init and "backend == 'auto'" in init and "backend = env_backend" in init):
        raise ProbeError(f"{where}: initialize_fp4_gemm_config no longer maps the variable as the entry says")
    if 'fp4_gemm_runner_backend: str = "flashinfer_cutlass"' not in source(version, "srt/server_args.py"):
        raise ProbeError(f"SGLang {version} srt/server_args.py: the FP4 GEMM backend's default is no longer flashinfer_cutlass")
    return True


AUTOTUNE_CORRUPTING_FLASHINFER = ("0.6.17", "0.6.18")  # flashinfer #4841 and sglang #34629 (RTX PRO 6000)


def flashinfer_autotune_corrupts(version: str) -> bool:
    """Affected: the release's wheel pins flashinfer_python at a version whose autotuned CUTLASS fused-MoE
    tactics corrupt NVFP4 output on SM120 (read from its METADATA, as the lookup sglang_release_stack reads
    it); the fix's flag must exist in that release (ServerArgs field disable_flashinfer_autotune)."""
    metadata = next((CACHE / "sglang" / version).glob("sglang-*.dist-info/METADATA"), None)
    if metadata is None:
        raise ProbeError(f"SGLang {version}: no unpacked wheel METADATA")
    pins = re.findall(r"^Requires-Dist: flashinfer[_-]python(?:\[[^\]]*\])?==([^\s;]+)", metadata.read_text(), re.M)
    if len(pins) != 1:
        raise ProbeError(f"SGLang {version}: METADATA pins flashinfer_python {len(pins)} times: {pins}")
    srt = CACHE / "sglang" / version / "sglang" / "srt"
    fields = [srt / "server_args.py", *sorted((srt / "arg_groups" / "fields").glob("*.py"))]
    if not any("disable_flashinfer_autotune:" in f.read_text() for f in fields if f.is_file()):
        raise ProbeError(f"SGLang {version}: no disable_flashinfer_autotune field: the entry's fix does not exist there")
    return pins[0] in AUTOTUNE_CORRUPTING_FLASHINFER


def draft_inherits_quantization_and_fails(version: str) -> bool:
    """Affected: ServerArgs gives the draft the target's quantization when
    speculative_draft_model_quantization is not given (server_args.py, or arg_groups/serving_hook.py
    from 0.5.19), and get_quant_config, finding no quantization config in the draft's directory, raises
    "Cannot find the config file" for modelopt_fp4 rather than quantizing the draft online
    (ModelOptFp4Config.for_online_weight_quantization)."""
    srt = CACHE / "sglang" / version / "sglang" / "srt"
    inherit = re.compile(r"speculative_draft_model_quantization(\s*=|=)\s*(self|cfg)\.quantization")
    places = [srt / "server_args.py", srt / "arg_groups" / "serving_hook.py"]
    if not any(p.is_file() and inherit.search(p.read_text()) for p in places):
        raise ProbeError(f"SGLang {version}: the draft no longer takes the target's quantization where the probe reads it")
    where = f"SGLang {version} srt/model_loader/weight_utils.py"
    quant = ast.unparse(function(source(version, "srt/model_loader/weight_utils.py"), "get_quant_config", where))
    if "Cannot find the config file" not in quant:
        raise ProbeError(f"{where}: get_quant_config no longer raises for a missing quantization config")
    return "for_online_weight_quantization" not in quant


def triton_mla_decode_two_stages(version: str) -> bool:
    """Affected: SGLang's Triton grouped (MLA) decode kernel runs the 576-wide key (512 + 64 rope) with
    num_stages 2 on CUDA and no case for compute capability 12, the configuration vLLM's identical
    kernel overran SM120's shared memory with for an FP8 KV cache."""
    root = CACHE / "sglang" / version / "sglang"
    files = [root / "srt/layers/attention/triton_ops/decode_attention.py", root / "kernels/ops/attention/decode_attention.py"]
    found = [f for f in files if f.is_file()]
    if not found:
        raise ProbeError(f"SGLang {version}: no Triton decode_attention.py where the probe reads it")
    where = f"SGLang {version} {found[0].relative_to(root)}"
    body = ast.unparse(function(found[0].read_text(encoding="utf-8"), "_decode_grouped_att_m_fwd", where))
    if "Lk == 576" not in body:
        raise ProbeError(f"{where}: _decode_grouped_att_m_fwd has no 576-wide (MLA) key case any more")
    return "num_stages = 2" in body and not re.search(r"sm_?12|is_sm120|get_device_capability", body)


def jit_activation_decltype_of_member_template(version: str) -> bool:
    """Affected: on CUDA SGLang's SiluAndMul is its JIT activation kernel (srt/layers/activation.py
    imports sglang.jit_kernel.activation), and its activation.cuh returns a trailing
    decltype(activation_kernel<...>) of a member variable template, which GCC 12 rejects as nvcc's host
    compiler (reproduced with nvcc 13.0.88: 0.5.11 and 0.5.12.post1 fail with g++ 12.2, 0.5.13 and
    0.5.16 compile; all four compile with g++ 14.2). Releases before 0.5.11 use sgl_kernel's
    prebuilt silu_and_mul; from 0.5.17 the kernel lives under kernels/jit."""
    root = CACHE / "sglang" / version / "sglang"
    if not root.is_dir():
        pytest.fail(f"no unpacked SGLang {version} under {CACHE / 'sglang'}: run `make sglang-wheels` first")
    found = [root / f"{base}/csrc/elementwise/activation.cuh" for base in ("jit_kernel", "kernels/jit")]
    cuh = [f for f in found if f.is_file()]
    uses_jit = "sglang.jit_kernel.activation import" in source(version, "srt/layers/activation.py")
    if uses_jit and not cuh:
        raise ProbeError(
            f"SGLang {version}: srt/layers/activation.py imports the JIT activation but no activation.cuh is where the probe reads"
        )
    return uses_jit and bool(cuh) and re.search(r"->\s*decltype\(activation_kernel<", cuh[0].read_text(encoding="utf-8")) is not None


def activation_is_jit_on_cuda(version: str) -> bool:
    """Affected: srt/layers/activation.py takes silu_and_mul on CUDA from SGLang's own JIT kernels
    (sglang.jit_kernel.activation, from 0.5.17 sglang.kernels.ops.activation.activation), built with
    nvcc and the host compiler at the first forward; before, from sgl_kernel's prebuilt library."""
    text = source(version, "srt/layers/activation.py")
    cuda = re.split(r"\nif _is_cuda(?: or _is_xpu)?:", text, maxsplit=1)  # 0.5.9-0.5.10: `if _is_cuda or _is_xpu:`
    if len(cuda) != 2:
        raise ProbeError(f"SGLang {version}: srt/layers/activation.py has no `if _is_cuda:` import branch")
    branch = cuda[1].split("\nelif ", 1)[0]
    return bool(re.search(r"from sglang\.(jit_kernel\.activation|kernels\.ops\.activation\.activation) import", branch))


def metrics_middleware_reads_route_path(version: str) -> bool:
    """Affected: the HTTP-metrics middleware's _get_fastapi_request_path returns route.path of the matched route
    unguarded (srt/utils/common.py; from 0.5.23 srt/observability/http_request_metrics.py), which FastAPI 0.137's
    _IncludedRouter does not have; from 0.5.16 it reads getattr(route, "path", ...)."""
    for relative in ("srt/utils/common.py", "srt/observability/http_request_metrics.py"):
        try:
            text = source(version, relative)
        except ProbeError:
            continue
        if "def _get_fastapi_request_path" in text:
            node = function(text, "_get_fastapi_request_path", f"SGLang {version} {relative}")
            body = ast.unparse(node)
            return "route.path" in body and "getattr(route, 'path'" not in body
    raise ProbeError(f"SGLang {version}: no _get_fastapi_request_path in srt/utils/common.py nor srt/observability/")


def flashinfer_pin_lacks_fp4_gdc(version: str) -> bool:
    """Affected: the FlashInfer this release pins (its wheel's METADATA) builds the SM120 CUTLASS FP4 GEMM without
    -DCUTLASS_ENABLE_GDC_FOR_SM100=1, as scripts/record_flashinfer_gdc.py read each pinned FlashInfer wheel's
    flashinfer/jit/gemm/core.py (tests/data/flashinfer-sm120-fp4-gdc.txt)."""
    metadata = next((CACHE / "sglang" / version).glob("sglang-*.dist-info/METADATA")).read_text()
    pin = re.search(r"^Requires-Dist: flashinfer[_-]python(?:\[[^\]]*\])?==(\S+)", metadata, re.M)
    if pin is None:
        raise ProbeError(f"SGLang {version}: no flashinfer_python pin in its METADATA")
    readings = dict(
        line.split()[:2]
        for line in (DATA / "flashinfer-sm120-fp4-gdc.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    if pin.group(1) not in readings:
        raise ProbeError(f"FlashInfer {pin.group(1)} (pinned by SGLang {version}) was not read: run scripts/record_flashinfer_gdc.py")
    return readings[pin.group(1)] == "no-gdc"


def reasoner_requires_one_think_end_token(version: str) -> bool:
    """Affected: the release's ReasonerGrammarBackend refuses a think-end token that is not exactly one token."""
    source = CACHE / "sglang" / version / "sglang/srt/constrained/reasoner_grammar_backend.py"
    return source.is_file() and "must encode to exactly one token" in source.read_text()


# entry id -> probe(version) -> affected
PROBES: dict[str, Callable[[str], bool]] = {
    "reasoning-parser-think-end-not-one-token": reasoner_requires_one_think_end_token,
    "sglang-jit-activation-vs-gcc-12": jit_activation_decltype_of_member_template,
    "sglang-jit-toolchain-missing": activation_is_jit_on_cuda,
    "modelopt-nvfp4-read-as-fp8": modelopt_read_as_fp8,
    "nvfp4-moe-runner-auto-is-trtllm-on-sm120": nvfp4_moe_auto_is_trtllm,
    "deepgemm-on-sm120": deepgemm_on_for_sm120,
    "trtllm-mla-on-sm120": trtllm_mla_admits_sm120,
    "fa3-on-sm120": fa3_rejects_sm120,
    "draft-inherits-mla-only-backend": draft_inherits_target_backend,
    "allreduce-fusion-noop-on-sm120": allreduce_fusion_noop,
    "allreduce-fusion-raises-on-sm120": allreduce_fusion_raises,
    "torch-symm-mem-keyerror-on-sm120": torch_symm_mem_keyerror,
    "torch-symm-mem-inactive-on-pcie": torch_symm_mem_inactive,
    "jit-all-reduce-on-pcie": custom_all_reduce_v2_crashes_on_pcie,
    "pcie-ipc-allreduce-kernels": pcie_ipc_allreduce_read,
    "fp4-gemm-env-trtllm-on-sm120": fp4_gemm_env_picks_trtllm,
    "draft-inherits-target-quantization": draft_inherits_quantization_and_fails,
    "draft-quantized-online-to-nvfp4": lambda version: not draft_inherits_quantization_and_fails(version),
    "triton-mla-decode-fp8-kv-smem-on-sm120": triton_mla_decode_two_stages,
    "flashinfer-cutlass-moe-autotune-corrupts-on-sm120": flashinfer_autotune_corrupts,
    "v1-loads-500-metrics-middleware-fastapi-0137": metrics_middleware_reads_route_path,
    "flashinfer-fp4-gemm-pdl-race-on-sm120": flashinfer_pin_lacks_fp4_gdc,
}

# entry id -> why its range is not read from SGLang's source
NOT_FROM_SOURCE: dict[str, str] = {
    "cutlass-mla-flashmla-on-sm120": (
        "no release has a capability check on cutlass_mla or flashmla (attention_registry.py creates them as asked; cutlass_mla "
        "is gone from the choices from 0.5.20), so whether they run on SM120 is decided by the kernel package's build targets"
    ),
    "flashinfer-trtllm-moe-fp4-on-sm120": (
        "no release checks the capability for --moe-runner-backend/--fp4-gemm-backend flashinfer_trtllm; the "
        "NotImplementedError off SM100 comes from FlashInfer's trtllm-gen kernels, so the bundled FlashInfer decides"
    ),
    "fp8-kv-from-checkpoint": (
        "the silent FP8 switch is in every release (configure_kv_cache_dtype: model_runner.py to 0.5.15, "
        "mem_cache/kv_cache_dtype.py from 0.5.16); the attention backend then failing on SM120 was observed on 0.5.9, "
        "which the kernels decide, not SGLang's Python"
    ),
    "fp8-kv-from-checkpoint-later": (
        "the silent FP8 switch is in every release (configure_kv_cache_dtype: model_runner.py to 0.5.15, "
        "mem_cache/kv_cache_dtype.py from 0.5.16); the split from fp8-kv-from-checkpoint at 0.5.10 is where the "
        "failure is observed, not a change in the source"
    ),
}


def in_range(entry_id: str, version: str) -> bool:
    entry = ENTRIES[entry_id]
    low, high = entry.versions
    found = version_tuple(version)
    return version_tuple(low) <= found and (high is None or found <= version_tuple(high))


@pytest.mark.parametrize("entry_id", sorted(PROBES))
def test_range_is_what_the_source_says(entry_id: str) -> None:
    """Every release from 0.5.9 to 0.5.23: affected by the source exactly when inside the entry's range."""
    wrong = []
    for version in RELEASES:
        affected = PROBES[entry_id](version)
        if affected != in_range(entry_id, version):
            wrong.append(f"{version}: source says {'affected' if affected else 'not affected'}, range {ENTRIES[entry_id].range_text}")
    assert not wrong, f"{entry_id}: " + "; ".join(wrong)


@pytest.mark.parametrize("entry_id", sorted(PROBES))
def test_range_edges_are_releases_read_here(entry_id: str) -> None:
    """The first and last affected release and the releases just outside are among those read."""
    affected = [v for v in RELEASES if PROBES[entry_id](v)]
    assert affected, f"{entry_id}: no release from {RELEASES[0]} to {RELEASES[-1]} is affected by its source"
    first, last = RELEASES.index(affected[0]), RELEASES.index(affected[-1])
    low, high = ENTRIES[entry_id].versions
    assert version_tuple(affected[0]) == version_tuple(low) or first == 0, (entry_id, affected[0], low)
    assert (high is None and last == len(RELEASES) - 1) or version_tuple(affected[-1]) == version_tuple(high), (
        entry_id,
        affected[-1],
        high,
    )


def test_every_ranged_entry_is_proven_or_says_why() -> None:
    ranged = sorted(i for i, e in ENTRIES.items() if e.versions != ("0.0.0", None))
    unexplained = [i for i in ranged if i not in PROBES and i not in NOT_FROM_SOURCE]
    assert not set(PROBES) & set(NOT_FROM_SOURCE)
    assert not unexplained, f"ranged catalogue entries with neither a source probe nor a reason in NOT_FROM_SOURCE: {unexplained}"


def test_a_probe_fails_loudly_when_the_code_moved(tmp_path: Path) -> None:
    with pytest.raises(ProbeError, match="no class ModelOptNvFp4FusedMoEMethod"):
        method("class Other:\n    pass\n", "ModelOptNvFp4FusedMoEMethod", "apply", "here")
    with pytest.raises(ProbeError, match="has no method apply"):
        method("class ModelOptNvFp4FusedMoEMethod:\n    def other(self): pass\n", "ModelOptNvFp4FusedMoEMethod", "apply", "here")


def test_the_docs_table_follows_the_catalogue() -> None:
    """docs/start-failures.md lists every entry once, with the catalogue's range and severity."""
    text = (DATA.parent.parent / "docs" / "start-failures.md").read_text()
    table = text.split("| id | row | versions | severity | fails at | caught by | decided by |", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in table.strip().splitlines()[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells
    assert sorted(rows) == sorted(ENTRIES)
    for entry_id, entry in ENTRIES.items():
        low, high = entry.versions
        shown = "all" if low == "0.0.0" and high is None else f"{low}-" if high is None else low if low == high else f"{low}-{high}"
        assert rows[entry_id][2] == shown, (entry_id, rows[entry_id][2], shown)
        assert rows[entry_id][3].split(",")[0].split(" ")[0] == entry.severity, entry_id
        assert rows[entry_id][4:6] == [entry.phase, entry.caught_by], entry_id
    # what nothing here can catch is named where the docs list what only an SM120 host can show
    only_sm120 = text.split("## What only an SM120 host can show", 1)[1].split("\n## ", 1)[0]
    for entry_id, entry in ENTRIES.items():
        if entry.caught_by == "none":
            assert f"`{entry_id}`" in only_sm120, entry_id
