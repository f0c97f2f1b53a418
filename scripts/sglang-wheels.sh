#!/usr/bin/env bash
# Fetch the SGLang wheels the tests read (no dependencies), check their sha256, unpack them.
#   .cache/sglang/sglang-<version>-py3-none-any.whl
#   .cache/sglang/<version>/sglang/...          the unpacked package
# Versions and hashes: tests/data/sglang-wheels.txt. Redone only when a wheel is missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
cache=${SGLANG_TOOLKIT_CACHE:-$root/.cache}/sglang
mkdir -p "$cache"
grep -v '^\s*#' "$root/tests/data/sglang-wheels.txt" | while read -r version sha; do
    [ -n "$version" ] || continue
    wheel="$cache/sglang-$version-py3-none-any.whl"
    if [ ! -f "$wheel" ]; then
        rm -rf "$cache/dl-$version"
        "$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
            -d "$cache/dl-$version" "sglang==$version"
        mv "$cache/dl-$version"/sglang-"$version"-*.whl "$wheel"
        rm -rf "$cache/dl-$version"
    fi
    found=$(sha256sum "$wheel" | cut -d' ' -f1)
    if [ "$found" != "$sha" ]; then
        echo "sglang-wheels: $wheel has sha256 $found, expected $sha (tests/data/sglang-wheels.txt)" >&2
        exit 1
    fi
    if [ ! -d "$cache/$version/sglang" ]; then
        rm -rf "$cache/$version.partial"
        "$python" -m zipfile -e "$wheel" "$cache/$version.partial"
        mv "$cache/$version.partial" "$cache/$version"
    fi
done
echo "sglang-wheels: $(ls -d "$cache"/*/ | xargs -n1 basename | tr '\n' ' ')in $cache"
