#!/usr/bin/env bash
# Fill the controller's wheelhouse with the CUDA toolkit wheels named in the stack, for
# Linux x86_64 hosts, and lay out a controller-side toolkit from them for the unit tests.
#
#   .cache/wheelhouse/cuda-toolkit-<version>/   wheels, copied to hosts by the wheels method
#   .cache/cuda-toolkit-<version>/toolkit/      nvcc etc. for pytest (same installer script)
# Both are redone only when the wheel specs change.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/lib/wheelhouse.sh"
version=$("$python" "$root/scripts/stack_var.py" stack_cuda_version)
mapfile -t specs < <("$python" "$root/scripts/stack_var.py" stack_cuda_wheel_specs)
wheelhouse="$cache/wheelhouse/cuda-toolkit-$version"

fill_wheelhouse wheelhouse "$python" "$wheelhouse" "${specs[@]}"

toolkit="$cache/cuda-toolkit-$version"
if [ "$(cat "$toolkit/.specs" 2>/dev/null)" != "${specs[*]}" ]; then
    rm -rf "$toolkit"
    sh "$root/roles/cuda_toolkit/files/install-cuda-wheels.sh" "$python" "$wheelhouse" "$toolkit" "$version" "${specs[@]}"
    printf '%s' "${specs[*]}" >"$toolkit/.specs"
fi
# Test witnesses (cuobjdump): a wheelhouse for the containers, an unpacked copy for pytest.
mapfile -t tool_specs < <(grep -v '^\s*#' "$root/molecule/test-tools.txt" | grep .)
tools="$cache/wheelhouse/test-tools"
if [ "$(cat "$tools/.specs" 2>/dev/null)" != "${tool_specs[*]}" ]; then
    rm -rf "$tools" "$cache/test-tools"
    "$python" -m pip download --quiet --disable-pip-version-check --only-binary=:all: --no-deps \
        --platform manylinux2014_x86_64 --python-version 3.11 -d "$tools" "${tool_specs[@]}"
    "$python" -m pip install --quiet --disable-pip-version-check --no-deps --no-index \
        --find-links "$tools" --target "$cache/test-tools" "${tool_specs[@]}"
    printf '%s' "${tool_specs[*]}" >"$tools/.specs"
fi
echo "wheelhouse: $wheelhouse ($(ls "$wheelhouse" | wc -l) wheels); controller toolkit: $toolkit/toolkit"
