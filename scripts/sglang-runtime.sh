#!/usr/bin/env bash
# The runtime environment of the real SGLang on a CPU, for tests and the lab host:
#   .cache/sglang-runtime/<version>/venv     SGLang's dependencies, exactly as pinned in
#                                            tests/runtime/sglang-<version>.txt (--no-deps), plus the
#                                            TEST FIXTURE sgl-kernel CPU import shim
# SGLang itself is not installed: tests put the (patched) tree from .cache/sglang/<version> first on
# the path, the lab's release venvs reach these site-packages through a .pth file.
#   .cache/sglang-runtime/site-packages       -> the site-packages of the stack's SGLang version
# Redone only when the requirements file or the shim changes. Versions: all tests/runtime/*.txt,
# or the ones given as arguments.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${RUNTIME_PYTHON:-python3}
cache=${SGLANG_TOOLKIT_CACHE:-$root/.cache}/sglang-runtime
shim=$root/tests/fixtures/sgl-kernel-cpu-shim
if [ $# -eq 0 ]; then
    set -- $(ls "$root"/tests/runtime/sglang-*.txt | sed 's|.*/sglang-\(.*\)\.txt$|\1|')
fi
for version in "$@"; do
    requirements=$root/tests/runtime/sglang-$version.txt
    [ -f "$requirements" ] || { echo "sglang-runtime: no $requirements for SGLang $version" >&2; exit 2; }
    dir=$cache/$version
    stamp=$( { cat "$requirements"; find "$shim" -type f -name '*.py' -print0 | sort -z | xargs -0 cat; } | sha256sum | cut -c1-16)
    if [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$stamp" ]; then
        continue
    fi
    echo "sglang-runtime: building the SGLang $version runtime in $dir (a few minutes, several GB)"
    # The stamp is written last: an interrupted build is redone from scratch next time.
    rm -rf "$dir"
    mkdir -p "$dir"
    "$python" -m venv "$dir/venv"
    "$dir/venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$requirements" 2>&1 \
        | { grep -v "^WARNING: Location 'file:" || true; } >&2
    site=$("$dir/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    cp -r "$shim/sgl_kernel" "$site/sgl_kernel"
    "$dir/venv/bin/python" -c 'import torch, transformers, triton, sgl_kernel' \
        || { echo "sglang-runtime: the $version runtime in $dir does not import" >&2; exit 1; }
    echo "$stamp" >"$dir/.stamp"
done
# The stack's SGLang version is the one the lab host and molecule mount (read-only) at
# /opt/sglang-runtime/site-packages: $cache/site-packages points at its site-packages.
stack_version=$("${PYTHON:-$root/.venv/bin/python}" "$root/scripts/stack_var.py" stack_sglang_version)
if [ -d "$cache/$stack_version/venv" ]; then
    site=$("$cache/$stack_version/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    ln -sfn "$site" "$cache/site-packages"
fi
echo "sglang-runtime: $(ls -d "$cache"/*/venv 2>/dev/null | wc -l) runtime(s) in $cache"
