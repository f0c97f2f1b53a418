# Sourced by scripts/wheelhouse.sh and scripts/router-wheels.sh after they set root (the checkout):
# sets python (the controller venv's, or $PYTHON) and cache ($SGLANG_TOOLKIT_CACHE, else .cache), and
# defines fill_wheelhouse.
python=${PYTHON:-$root/.venv/bin/python}
cache=${SGLANG_TOOLKIT_CACHE:-$root/.cache}

# fill_wheelhouse LABEL PYTHON DIR SPEC...: the wheels of SPEC... and their dependencies for Linux x86_64
# hosts with Python 3.11 (the lab's Debian 12 and the controller venv), downloaded into DIR.partial and
# renamed to DIR when complete; redone only when the specs differ from those DIR was filled with.
fill_wheelhouse() {
    local label=$1 python=$2 dir=$3
    shift 3
    if [ "$(cat "$dir/.specs" 2>/dev/null)" != "$*" ]; then
        echo "$label: downloading $*"
        rm -rf "$dir.partial"
        "$python" -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
            --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform any \
            --python-version 3.11 -d "$dir.partial" "$@"
        printf '%s' "$*" >"$dir.partial/.specs"
        rm -rf "$dir"
        mv "$dir.partial" "$dir"
    fi
}
