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
. "$root/scripts/lib/wheelhouse.sh"
package=$("$python" "$root/scripts/stack_var.py" stack_router_package)
version=$("$python" "$root/scripts/stack_var.py" stack_router_version)
mapfile -t requirements < <("$python" "$root/scripts/stack_var.py" stack_router_requirements)
specs=("$package==$version" "${requirements[@]}")
wheelhouse="$cache/wheelhouse/router-$version"
fill_wheelhouse router-wheels "$python" "$wheelhouse" "${specs[@]}"
echo "router-wheels: $wheelhouse ($(ls "$wheelhouse" | wc -l) wheels)"
