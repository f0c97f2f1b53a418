#!/usr/bin/env bash
# Create the controller virtualenv from the pinned requirements.
#   scripts/venv.sh VENV PYTHON
set -euo pipefail
venv=$1 python=$2
# Never the venv's own python (make puts it first on PATH): it is about to be removed.
venv_bin=$(cd "$(dirname "$venv")" && pwd)/$(basename "$venv")/bin
PATH=$(printf '%s' "$PATH" | tr ':' '\n' | grep -vxF "$venv_bin" | paste -sd: -)
hash -r
python=$(command -v "$python") || { echo "venv: no $2 on PATH" >&2; exit 1; }
if ! "$python" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && [ -r /etc/debian_version ] && command -v apt-get >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    else
        echo "venv: $python cannot create virtualenvs; install python3-venv (Debian/Ubuntu) and run again" >&2
        exit 1
    fi
fi
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r requirements.txt
# The toolkit's own Python (pyproject.toml: the host package, the controller package, the console scripts
# sglang-flags, sglang-compat, ...), installed editable so that the checkout is what runs.
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -e "$(cd "$(dirname "$0")/.." && pwd)"
cp requirements.txt "$venv/.requirements"
