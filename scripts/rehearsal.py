#!/usr/bin/env python3
"""make rehearsal: run the production build specs as far as a machine without a GPU or git access allows.

    scripts/rehearsal.py            the full rehearsal (build venvs, sglang's dependency closure, release install)
    scripts/rehearsal.py --reduced  no build venvs, no closure download, no release install (for make test)
    scripts/rehearsal.py --sglang 0.5.13
                                    that release as the deploy renders it: the artifacts whose package-index
                                    wheel fits are those wheels (the pipeline's prebuilt phase, no stand-in),
                                    only the rest are stood in for

Prints one line per check, `PASS <name>: ...`, `FAIL <name>: <cause>` or `UNCHECKED <name>: <what
could not be checked and why>` (an upstream file not read at its tag), then `N passed, M failed`
(`, K unchecked` when some were); exits 1 when a check failed. The production specs are rendered by Ansible from
inventory/example-site (with the defaults of role toolkit_defaults). Work and caches live in
$SGLANG_TOOLKIT_CACHE/rehearsal (.cache/rehearsal).
See docs/testing.md "Rehearsal".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The toolkit's command-line tools: console scripts in the venv whose Python runs this script (make venv).
BIN = Path(sys.executable).parent

import yaml  # noqa: E402

from sglang_sm120.build.pipeline import (  # noqa: E402
    BuildSpecError,
    SharedObject,
    plan,
    verify_wheel,
    wheel_name_version,
)
from sglang_sm120.release.install import site_packages  # noqa: E402
from sglang_sm120_controller.index_wheels import taken_from_index  # noqa: E402
from sglang_sm120_controller.rehearsal.build import (  # noqa: E402
    Outcome,
    arch_origin,
    artifact_records,
    build_in_process,
    check_arch_lists,
    check_build_requires,
    check_cmake_options,
    check_cuda_arch_matches_cuobjdump,
    check_cuda_pins,
    check_facts_agree,
    check_flashinfer_arch,
    check_index_artifact,
    check_index_pins,
    check_local_versions,
    check_nvidia_keys,
    check_ours_wins,
    check_poll_not_recursive,
    check_release,
    check_source_identity,
    check_triton_pin,
    check_upstream_rejected,
    compile_object,
    fact,
    fetch_meta_wheel,
    index_rehearsal_spec,
    objects_of_dir,
    rehearsal_spec,
    release_install,
    run_builds,
    run_check,
    standin_objects,
    summary,
    verify_standin,
    write_standin_tree,
)
from sglang_sm120_controller.rehearsal.release import check_imports, closures_for_pythons, python_closure  # noqa: E402
from sglang_sm120_controller.rehearsal.upstream import load_reference  # noqa: E402

CACHE = Path(os.environ.get("SGLANG_TOOLKIT_CACHE", ROOT / ".cache"))
WORK = CACHE / "rehearsal"
FACTS = ROOT / "tests" / "data" / "upstream-build-facts.yml"
UPSTREAM = ROOT / "tests" / "data" / "upstream" / "index.yml"
FIXTURE = ROOT / "tests" / "fixtures" / "rehearsal-standins"
PROBE = ROOT / "tests" / "fixtures" / "sm120-probe" / "probe.cu"
REAL = CACHE / "real-wheels"
CUOBJDUMP = CACHE / "test-tools" / "nvidia" / "cu13" / "bin" / "cuobjdump"
RENDER = """- name: Render the production build specs and stack for make rehearsal
  hosts: gpu_hosts[0]
  gather_facts: false
  roles:
    - role: sm120.sglang.toolkit_defaults
  tasks:
    - name: Write them as JSON
      ansible.builtin.copy:
        dest: "{{ rehearsal_out }}"
        content: "{{ {'specs': sglang_build_specs, 'stack': dict(query('ansible.builtin.varnames', '^stack_')
          | zip(query('ansible.builtin.vars', *query('ansible.builtin.varnames', '^stack_')))),
          'preflight': {'preflight_max_python': preflight_max_python | default('')}} | to_nice_json }}"
        mode: "0644"
      delegate_to: localhost
"""
CUDA_SPECS = ("torch", "flashinfer", "flashinfer_jit_cache", "sgl_kernel", "torchvision", "torchaudio", "torch_memory_saver")
KEYS = {"debian13": "8793F200", "debian12": "3bf863cc"}


def render(inventory: Path, sglang: str | None = None) -> dict[str, Any]:
    """sglang_build_specs and the stack_* variables, as Ansible renders them for the first production host.

    Without `sglang`: the inventory's release with the specs as written (every CUDA artifact a source build,
    which the rehearsal stands in for). With it: that release as the deploy renders it, each package-index
    wheel that fits taken as its spec's prebuilt wheel (the lookup sglang_artifact_choices)."""
    with tempfile.TemporaryDirectory(prefix="rehearsal-render-") as tmp:
        playbook, out = Path(tmp) / "render.yml", Path(tmp) / "out.json"
        playbook.write_text(RENDER, encoding="utf-8")
        env = {**os.environ, "SGLANG_TOOLKIT_CACHE": str(CACHE), "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
        binary = shutil.which("ansible-playbook", path=f"{ROOT / '.venv' / 'bin'}:{env.get('PATH', '')}") or "ansible-playbook"
        extra = ["-e", f"stack_sglang_version={sglang}"] if sglang else ["-e", "sglang_build_index_wheels=false"]
        proc = subprocess.run(
            [binary, "-i", str(inventory), str(playbook), "-e", f"rehearsal_out={out}", *extra],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"ansible-playbook -i {inventory} could not render the specs: {(proc.stdout + proc.stderr).strip()[-800:]}")
        return json.loads(out.read_text(encoding="utf-8"))


def real_sgl_kernel(version: str) -> tuple[Path, Path]:
    found = sorted(REAL.glob(f"sgl_kernel-{version}-*.whl"))
    if not found or not (found[0].with_name(found[0].name + ".d") / ".done").exists():
        raise FileNotFoundError(f"no unpacked real sgl-kernel {version} under {REAL}: run scripts/real-wheels.sh (make wheelhouse)")
    return found[0], found[0].with_name(found[0].name + ".d")


def python_tag() -> str:
    out = subprocess.run(
        ["python3", "-c", "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')"], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reduced", action="store_true", help="skip build venvs, the dependency closure and the release install")
    parser.add_argument("--inventory", default=str(ROOT / "inventory" / "example-site"))
    parser.add_argument("--specs-json", help="use these rendered specs (JSON: {specs, stack}) instead of rendering the inventory")
    parser.add_argument(
        "--sglang",
        metavar="VERSION",
        help="rehearse this SGLang release as the deploy renders it (index wheels taken where they fit); "
        "default: the inventory's release with every CUDA artifact a source build",
    )
    args = parser.parse_args(argv)
    began = time.monotonic()
    outcomes: list[Outcome] = []

    def report(outcome: Outcome) -> Outcome:
        outcomes.append(outcome)
        print(outcome.line(), flush=True)
        return outcome

    def finish() -> int:
        print(f"(rehearsal{' --reduced' if args.reduced else ''} took {time.monotonic() - began:.0f} s)", flush=True)
        print(summary(outcomes), flush=True)
        return 1 if any(o.failed for o in outcomes) else 0

    rendered: dict[str, Any] = {}

    def do_render() -> str:
        rendered.update(json.loads(Path(args.specs_json).read_text()) if args.specs_json else render(Path(args.inventory), args.sglang))
        names = [s["name"] for s in rendered["specs"]]
        taken = [s["name"] for s in rendered["specs"] if taken_from_index(s)]
        release = f"SGLang {rendered['stack'].get('stack_sglang_version')}"
        return f"{len(names)} specs ({', '.join(names)}) of {release} rendered from {args.specs_json or args.inventory}" + (
            f"; the package index's own wheels for {', '.join(taken)}" if taken else "; every CUDA artifact a source build"
        )

    if not report(run_check("render", do_render)).ok:
        return finish()
    specs, stack = rendered["specs"], rendered["stack"]
    facts = yaml.safe_load(FACTS.read_text(encoding="utf-8"))
    reference = load_reference(UPSTREAM, yaml.safe_load(UPSTREAM.read_text(encoding="utf-8")))
    cuda_home = CACHE / f"cuda-toolkit-{stack['stack_cuda_version']}" / "toolkit"
    context = {
        "cuda_version": stack["stack_cuda_version"],
        "nvcc_build": stack["stack_cuda_nvcc_build"],
        "cuda_home": str(cuda_home),
        "arch": stack["stack_cuda_arch"],
    }

    def do_plan() -> str:
        planned = plan(specs, context)
        return "order " + " -> ".join(p.name for p in planned)

    report(run_check("plan", do_plan))
    by_name = {s["name"]: s for s in specs}
    from_index = [s["name"] for s in specs if taken_from_index(s)]
    built = [s for s in specs if s["name"] not in from_index]
    built_cuda = [n for n in CUDA_SPECS if n in by_name and n not in from_index]
    # -- each spec built here against upstream's own files at its ref (tests/data/upstream), and the facts they cannot give
    if built_cuda:
        report(run_check("facts agree with upstream files", check_facts_agree, facts, reference))
        for name in built_cuda:
            report(run_check(f"upstream build-requires {name}", check_build_requires, specs, facts, reference, name))
            report(run_check(f"upstream version {name}", check_source_identity, specs, facts, reference, stack, name))
        report(run_check("arch lists", check_arch_lists, built, facts, stack["stack_cuda_arch"], stack["stack_cuda_version"]))
        report(run_check("facts cmake-args", check_cmake_options, built, facts))
        if "torch" in built_cuda:
            report(run_check("facts triton-pin", check_triton_pin, built, facts))
        if {"flashinfer", "flashinfer_jit_cache"} & set(built_cuda):
            report(run_check("facts flashinfer-arch", check_flashinfer_arch, built, facts, stack["stack_cuda_version"]))
        report(run_check("facts local-version", check_local_versions, built, facts))
    # -- each artifact taken from the index: what the spec pins beside it is what the wheel requires
    for name in from_index:
        prebuilt = by_name[name]["prebuilt"]
        if by_name[name].get("pins"):
            report(run_check(f"index pins {name}", check_index_pins, by_name[name], Path(prebuilt["wheelhouse"]) / prebuilt["pattern"]))
    # -- the other defects, statically
    report(run_check("poll flat", check_poll_not_recursive, ROOT / "roles" / "sglang_build" / "tasks" / "wait.yml"))
    report(run_check("nvidia repo keys", check_nvidia_keys, ROOT / "roles" / "cuda_toolkit" / "vars" / "nvidia_repos", KEYS))
    meta_req = f"cuda-toolkit=={stack['stack_cuda_version']}"
    report(
        run_check(
            "cuda component pins",
            lambda: check_cuda_pins(fetch_meta_wheel(sys.executable, meta_req, WORK / "cuda-toolkit-meta"), stack["stack_cuda_components"]),
        )
    )
    sgl_version = str(stack.get("stack_kernel_version", stack.get("stack_sgl_kernel_version")))
    real: tuple[Path, Path] | None = None
    if "sgl_kernel" in built_cuda:  # PyPI's CUDA-12 kernel of the version built here: shadowing and refusal
        try:
            real = real_sgl_kernel(sgl_version)
        except FileNotFoundError as exc:
            report(Outcome("real sgl-kernel", False, str(exc)))
    if real is not None:
        files = sorted(p for p in real[1].rglob("*") if p.is_file() and ".so" in p.name)
        report(
            run_check(
                "cuda-arch vs cuobjdump",
                check_cuda_arch_matches_cuobjdump,
                BIN / "cuda-arch",
                str(CUOBJDUMP),
                files,
                sys.executable,
            )
        )

    # -- stand-ins for what is built from source and cannot be compiled here
    trees: dict[str, Path] = {}
    real_names = [p.relative_to(real[1]).as_posix() for p in real[1].rglob("*") if p.is_file()] if real else []
    tag = python_tag()

    def do_standins() -> str:
        objects = {n: standin_objects(by_name[n], facts, real_names, stack["stack_cuda_version"]) for n in built_cuda}
        targets = sorted({t for o in objects.values() for t in o.values()})
        compiled = {t: compile_object(cuda_home, PROBE, t, WORK / "objects") for t in targets}
        for name, objs in objects.items():
            trees[name] = write_standin_tree(
                by_name[name], facts, stack, WORK / "src" / name, FIXTURE / "standin_backend.py", compiled, objs, tag, reference
            )
        return f"stand-in source trees for {', '.join(trees)}; CUDA objects {', '.join(targets)} (nvcc {cuda_home})"

    if built_cuda and not report(run_check("stand-ins", do_standins)).ok:
        return finish()
    expected_tags = {n: str(fact(facts, n, "wheel_tag", "py3-none-any")).replace("{python}", tag) for n in CUDA_SPECS}
    cuda = str(stack["stack_cuda_version"])
    ours: dict[str, Path] = {}
    rehearsed = [
        index_rehearsal_spec(s, WORK / "not-rehearsed" / s["name"]) if s["name"] in from_index else rehearsal_spec(s, trees.get(s["name"]))
        for s in specs
    ]
    try:
        items = [p.to_dict() for p in plan(rehearsed, context)]
    except BuildSpecError as exc:
        report(Outcome("build plan", False, str(exc)))
        return finish()
    host = WORK / ("reduced-host" if args.reduced else "host")
    shutil.rmtree(host, ignore_errors=True)
    if args.reduced:
        # the stand-ins without build venvs; the index's wheels through the pipeline's own prebuilt phase
        for name in trees:

            def one(name: str = name) -> str:
                wheel = build_in_process(
                    _copy(trees[name], WORK / "reduced-src" / name), by_name[name], facts, WORK / "reduced-wheels" / name
                )
                ours[name] = wheel
                return verify_standin(wheel, by_name[name], expected_tags[name], arch_origin(by_name[name], facts, cuda))

            report(run_check(f"stand-in {name}", one))
        run = [i for i in items if i["name"] in from_index and set(i["depends_on"]) <= set(from_index)]
        for item in items:
            if item["name"] in from_index and item not in run:
                report(Outcome(f"build {item['name']}", False, "not run with --reduced: it depends on a stand-in", unchecked=True))
    else:
        run = items
    # what the role would stage from the controller: a stand-in tree, or the empty source behind an index wheel
    staged = {s["name"]: s["source"]["path"] for s in rehearsed if "path" in s["source"]}
    results = run_builds(run, host, staged, str(cuda_home), "python3", [], 2, None, 1500, None, stage_prebuilt(run, host))
    for item in run:
        report(results.get(item["name"]) or Outcome(f"build {item['name']}", False, "not run"))
    records = artifact_records(host, items)
    for name in from_index:
        if name in records:
            report(run_check(f"index {name}", check_index_artifact, by_name[name], records[name]))
    if not args.reduced:
        for name in trees:
            if name in records:
                directory = host / "wheelhouse" / name / records[name]["key"]
                ours[name] = directory / records[name]["installs"][0]
                origin = arch_origin(by_name[name], facts, cuda)
                report(run_check(f"stand-in {name}", verify_standin, ours[name], by_name[name], expected_tags[name], origin))

    # -- the real upstream sgl-kernel: shadowing and verification by the same rule
    if real is not None and "sgl_kernel" in ours:
        links = [ours["sgl_kernel"].parent, real[0].parent]
        report(
            run_check(
                "shadow sgl-kernel", check_ours_wins, sys.executable, by_name["sgl_kernel"], sgl_version, ours["sgl_kernel"], real[0], links
            )
        )

        def upstream() -> str:
            rules = by_name["sgl_kernel"]["verify"]
            if args.reduced:
                objects = objects_of_dir(real[1], rules)
            else:
                evidence = verify_wheel(real[0], {k: v for k, v in rules.items() if k != "cudart"})
                objects = [SharedObject(**o) for o in evidence["shared_objects"]]
            return check_upstream_rejected(real[0], by_name["sgl_kernel"], objects)

        report(run_check("upstream sgl-kernel verified", upstream))

    if "sglang" not in by_name:
        return finish()
    index_versions = {
        wheel_name_version(records[n]["installs"][0])[0]: _wheel_info(records[n])["version"] for n in from_index if n in records
    }
    if args.reduced:
        # a release of index wheels only: sglang's closure for the running Python (the install and the other Pythons: full run)
        if from_index and not built_cuda and len(index_versions) == len(from_index):
            version = f"{sys.version_info[0]}.{sys.version_info[1]}"
            pins = sorted({p for n in from_index for p in records[n].get("pins", [])})
            requirements = [by_name["sglang"]["source"]["wheel"], *index_versions]
            report(python_closure(sys.executable, version, requirements, {}, pins, WORK / "reduced-pythons", index=index_versions))
        return finish()
    wanted = [i["name"] for i in items if i["spec"].get("install", True)]
    missing = [n for n in wanted if n not in records]
    if missing:
        report(Outcome("release install", False, f"not run: missing verified artifacts {', '.join(missing)}"))
        return finish()
    closure = host / "wheelhouse" / "sglang" / records["sglang"]["key"]
    if real is not None:  # PyPI's manylinux sgl-kernel of the same version in the host wheelhouse beside ours
        beside = closure / real[0].name
        if not beside.exists():
            os.link(real[0], beside) if os.stat(real[0]).st_dev == os.stat(closure).st_dev else shutil.copy2(real[0], beside)
    artifacts = {n: records[n] for n in wanted}
    spec_map = {i["name"]: i["spec"] for i in items}
    record_pins = sorted({p for n in wanted for p in records[n].get("pins", [])})
    result: dict[str, Any] = {}

    def do_install() -> str:
        result.update(release_install("python3", WORK / "release" / "venv", host, artifacts, spec_map, WORK / "release" / "pip.log"))
        return f"{len(result['installed'])} verified wheels installed with {' '.join(result['argv'][3:6])} and read back"

    (WORK / "release").mkdir(parents=True, exist_ok=True)
    if report(run_check("release install", do_install)).ok:
        expected = {by_name[n].get("package", n): _wheel_info(records[n])["version"] for n in CUDA_SPECS if n in records}
        report(run_check("release is ours", check_release, result, WORK / "release" / "venv", expected, record_pins))
        # -- the imports a CPU allows, and which (issue 23, item 3)
        for outcome in check_imports(WORK / "release" / "venv", site_packages(str(WORK / "release" / "venv"))):
            report(outcome)
    # -- sglang's closure for every host Python the preflight allows (issue 23, item 4): ours re-tagged for each,
    # the index's own wheels at their versions from the index
    ours_wheels = {
        wheel_name_version(w)[0]: w
        for n in wanted
        if n != "sglang" and n not in from_index
        for w in [host / "wheelhouse" / n / records[n]["key"] / records[n]["installs"][0]]
    }
    for outcome in closures_for_pythons(
        sys.executable,
        ROOT / "roles" / "preflight" / "defaults" / "main.yml",
        by_name["sglang"]["source"]["wheel"],
        ours_wheels,
        record_pins,
        WORK / "pythons",
        preflight_overrides=rendered.get("preflight") or {},
        index=index_versions,
    ):
        report(outcome)
    return finish()


def stage_prebuilt(items: list[dict[str, Any]], host: Path) -> dict[str, str]:
    """Each item's prebuilt wheels linked into <host>/staged/<name>-prebuilt, as role sglang_build copies them to the host."""
    out = {}
    for item in items:
        if not item.get("prebuilt_files"):
            continue
        dest = host / "staged" / f"{item['name']}-prebuilt"
        dest.mkdir(parents=True, exist_ok=True)
        for source in map(Path, item["prebuilt_files"]):
            target = dest / source.name
            if not target.exists():
                os.link(source, target) if os.stat(source).st_dev == os.stat(dest).st_dev else shutil.copy2(source, target)
        out[item["name"]] = str(dest)
    return out


def _wheel_info(record: dict[str, Any]) -> dict[str, str]:
    from sglang_sm120.build.pipeline import wheel_name_version

    return {"version": wheel_name_version(record["installs"][0])[1]}


def _copy(src: Path, dest: Path) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest)
    return dest


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
