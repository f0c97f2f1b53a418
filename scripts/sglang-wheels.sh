#!/usr/bin/env bash
# Fetch the SGLang wheels the tests read (no dependencies), check their sha256, unpack them.
#   .cache/sglang/sglang-<version>-py3-none-any.whl   (or the file named in the third column)
#   .cache/sglang/<version>/sglang/...          the unpacked package
# Versions and hashes: tests/data/sglang-wheels.txt. Redone only when a wheel is missing.
# A third column names a platform wheel (releases from 0.5.2x are cp3xx manylinux, not pure
# Python): exactly that file is fetched, whatever the controller's Python, for its sources only.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
cache=${SGLANG_TOOLKIT_CACHE:-$root/.cache}/sglang
mkdir -p "$cache"
grep -v '^\s*#' "$root/tests/data/sglang-wheels.txt" | while read -r version sha file; do
    [ -n "$version" ] || continue
    wheel="$cache/${file:-sglang-$version-py3-none-any.whl}"
    target=()
    if [ -n "$file" ]; then
        # sglang-<version>-<python tag>-<abi tag>-<platform tag>.whl, e.g. cp311-cp311-manylinux_2_34_x86_64
        IFS=- read -r _ _ pytag abitag platform <<<"${file%.whl}"
        target=(--implementation cp --python-version "${pytag#cp}" --abi "$abitag" --platform "$platform")
    fi
    if [ ! -f "$wheel" ]; then
        rm -rf "$cache/dl-$version"
        "$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
            "${target[@]}" -d "$cache/dl-$version" "sglang==$version" 2>&1 \
            | { grep -v "^WARNING: Location 'file:" || true; } >&2
        mv "$cache/dl-$version/$(basename "$wheel")" "$wheel"
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
