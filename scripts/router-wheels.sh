#!/usr/bin/env bash
# Fill the controller's wheelhouse with SGLang's router (stack_router_package at stack_router_version)
# and what its launcher needs, for Linux x86_64 hosts with Python 3.11 (the lab's Debian 12 and the
# controller venv):
#
#   .cache/wheelhouse/router-<version>/   wheels, copied to the router host by role sglang_router
#
# Redone only when the specs change.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
cache=${SGLANG_TOOLKIT_CACHE:-$root/.cache}
package=$("$python" "$root/scripts/stack_var.py" stack_router_package)
version=$("$python" "$root/scripts/stack_var.py" stack_router_version)
mapfile -t requirements < <("$python" "$root/scripts/stack_var.py" stack_router_requirements)
specs=("$package==$version" "${requirements[@]}")
wheelhouse="$cache/wheelhouse/router-$version"
if [ "$(cat "$wheelhouse/.specs" 2>/dev/null)" != "${specs[*]}" ]; then
    echo "router-wheels: downloading ${specs[*]}"
    rm -rf "$wheelhouse.partial"
    "$python" -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform any \
        --python-version 3.11 -d "$wheelhouse.partial" "${specs[@]}"
    printf '%s' "${specs[*]}" >"$wheelhouse.partial/.specs"
    rm -rf "$wheelhouse"
    mv "$wheelhouse.partial" "$wheelhouse"
fi
echo "router-wheels: $wheelhouse ($(ls "$wheelhouse" | wc -l) wheels)"
