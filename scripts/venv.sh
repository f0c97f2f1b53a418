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
# The toolkit's own Python: module_utils/ is the one package root (sglang_sm120 ships to hosts,
# sglang_sm120_controller stays here); bin/, scripts/, the lookup plugins and pytest import it from here.
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
printf '%s\n' "$(cd "$(dirname "$0")/.." && pwd)/module_utils" > "$site/sglang_sm120.pth"
cp requirements.txt "$venv/.requirements"
