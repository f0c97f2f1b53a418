#!/usr/bin/env bash
# Fetch the real wheels tests/unit/controller/test_cuda_arch_real.py reads (tests/data/real-wheels.txt: requirement
# and sha256), check their sha256 and unpack their shared objects:
#
#   .cache/real-wheels/<wheel file>            the wheel (pip download --no-deps, Linux x86_64)
#   .cache/real-wheels/<wheel file>.d/         its shared objects (*.so*), unpacked once
#
# sgl-kernel 0.3.21 is a 535 MB wheel; pip's own cache makes a second download cheap. Redone only
# for a wheel that is missing or whose sha256 does not match.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
cache=${SGLANG_TOOLKIT_CACHE:-$root/.cache}
dest="$cache/real-wheels"
mkdir -p "$dest"
grep -v '^\s*#' "$root/tests/data/real-wheels.txt" | grep . | while read -r requirement sha256 platform; do
    name=${requirement%%==*}
    version=${requirement#*==}
    pattern="$(echo "$name" | tr '-' '_')-$version-*.whl"
    # shellcheck disable=SC2086
    wheel=$(ls "$dest"/$pattern 2>/dev/null | head -n1 || true)
    if [ -z "$wheel" ] || [ "$(sha256sum "$wheel" | cut -d' ' -f1)" != "$sha256" ]; then
        echo "real-wheels: downloading $requirement"
        rm -f "$dest"/$pattern
        "$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
            $(if [ -n "${platform:-}" ]; then echo "--platform $platform"; else echo "--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64"; fi) \
            --python-version 3.11 \
            -d "$dest" "$requirement"
        wheel=$(ls "$dest"/$pattern | head -n1)
        got=$(sha256sum "$wheel" | cut -d' ' -f1)
        if [ "$got" != "$sha256" ]; then
            echo "real-wheels: $wheel has sha256 $got, expected $sha256 (tests/data/real-wheels.txt)" >&2
            exit 1
        fi
        rm -rf "$wheel.d"
    fi
    if [ ! -e "$wheel.d/.done" ]; then
        rm -rf "$wheel.d.partial"
        "$python" - "$wheel" "$wheel.d.partial" <<'PY'
import re, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as archive:
    archive.extractall(sys.argv[2], [m for m in archive.namelist() if re.search(r"\.so(\.\d+)*$", m)])
PY
        touch "$wheel.d.partial/.done"
        rm -rf "$wheel.d"
        mv "$wheel.d.partial" "$wheel.d"
    fi
    echo "real-wheels: $(basename "$wheel") ok"
done
