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
# An overlay (a requirements file with a `# runtime-base: B` line, written by scripts/runtime_overlay.py) is a small
# venv holding only the distributions whose version the release resolves otherwise than the full runtime B; a .pth
# file puts B's site-packages after its own (torch, the shim and the rest come from B). B is built first; the
# overlay's stamp takes B's, so a rebuilt B rebuilds its overlays.
# The venvs themselves (about 6 GB each) live in a store outside the clone, one per version and
# requirements stamp, shared by every clone on this machine (a fresh clone, as CI makes, reuses them):
#   SGLANG_RUNTIME_STORE (default ~/.cache/sglang-toolkit/sglang-runtime)/<version>-<stamp>/venv
# and .cache/sglang-runtime/<version> is a link to it. SGLANG_RUNTIME_STORE=none builds in .cache.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${RUNTIME_PYTHON:-python3}
cache=${SGLANG_TOOLKIT_CACHE:-$root/.cache}/sglang-runtime
shim=$root/tests/fixtures/sgl-kernel-cpu-shim
base_of() { sed -n 's/^# runtime-base: \([^ ]*\) *$/\1/p' "$root/tests/runtime/sglang-$1.txt"; }
if [ $# -eq 0 ]; then
    set -- $(ls "$root"/tests/runtime/sglang-*.txt | sed 's|.*/sglang-\(.*\)\.txt$|\1|')
fi
# full runtimes first (an overlay's base among them), then the overlays, each once
ordered=()
for version in "$@"; do
    [ -f "$root/tests/runtime/sglang-$version.txt" ] || { echo "sglang-runtime: no $root/tests/runtime/sglang-$version.txt for SGLang $version" >&2; exit 2; }
    base=$(base_of "$version")
    [ -z "$base" ] || ordered+=("$base")
done
for version in "$@"; do [ -n "$(base_of "$version")" ] || ordered+=("$version"); done
for version in "$@"; do [ -z "$(base_of "$version")" ] || ordered+=("$version"); done
set -- $(printf '%s\n' "${ordered[@]}" | awk '!seen[$0]++')
store=${SGLANG_RUNTIME_STORE:-${XDG_CACHE_HOME:-$HOME/.cache}/sglang-toolkit/sglang-runtime}
mkdir -p "$cache"
# $cache/site-packages-<version> -> that runtime's site-packages (molecule/upgrade mounts 0.5.23's)
site_link() {
    local site
    site=$("$cache/$1/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    ln -sfn "$site" "$cache/site-packages-$1"
}
for version in "$@"; do
    requirements=$root/tests/runtime/sglang-$version.txt
    [ -f "$requirements" ] || { echo "sglang-runtime: no $requirements for SGLang $version" >&2; exit 2; }
    base=$(base_of "$version")
    if [ -n "$base" ]; then
        [ -z "$(base_of "$base")" ] || { echo "sglang-runtime: $requirements: its base $base is itself an overlay" >&2; exit 2; }
        base_stamp=$(cat "$cache/$base/.stamp" 2>/dev/null) || { echo "sglang-runtime: the base runtime $base of $version is not built" >&2; exit 1; }
    else
        base_stamp=
    fi
    stamp=$( { cat "$requirements"; find "$shim" -type f -name '*.py' -print0 | sort -z | xargs -0 cat; echo "$base_stamp"; } | sha256sum | cut -c1-16)
    if [ "$store" = none ]; then
        dir=$cache/$version
        [ ! -L "$dir" ] || rm -f "$dir"
    else
        dir=$store/$version-$stamp
        mkdir -p "$store"
        # one builder per store entry at a time (two clones may ask at once)
        exec 8>"$store/.lock-$version"
        flock 8
    fi
    if [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$stamp" ]; then
        if [ "$dir" != "$cache/$version" ]; then
            [ -L "$cache/$version" ] || rm -rf "$cache/$version"
            ln -sfn "$dir" "$cache/$version"
        fi
        site_link "$version"
        continue
    fi
    if [ -n "$base" ]; then
        echo "sglang-runtime: building the SGLang $version runtime in $dir (an overlay on $base's)"
    else
        echo "sglang-runtime: building the SGLang $version runtime in $dir (a few minutes, several GB)"
    fi
    # The stamp is written last: an interrupted build is redone from scratch next time.
    rm -rf "$dir"
    mkdir -p "$dir"
    "$python" -m venv "$dir/venv"
    "$dir/venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$requirements" 2>&1 \
        | { grep -v "^WARNING: Location 'file:" || true; } >&2
    site=$("$dir/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    if [ -n "$base" ]; then
        # the base's site-packages after this venv's own (a .pth path is appended to sys.path)
        # (the store's path, not this clone's link to it: the overlay outlives the clone)
        readlink -f "$("$cache/$base/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
            >"$site/zz-runtime-base.pth"
    else
        cp -r "$shim/sgl_kernel" "$site/sgl_kernel"
    fi
    "$dir/venv/bin/python" -c 'import torch, transformers, triton, sgl_kernel' \
        || { echo "sglang-runtime: the $version runtime in $dir does not import" >&2; exit 1; }
    echo "$stamp" >"$dir/.stamp"
    if [ "$dir" != "$cache/$version" ]; then
        [ -L "$cache/$version" ] || rm -rf "$cache/$version"
        ln -sfn "$dir" "$cache/$version"
        # older builds of this version in the store are no longer what any requirements file says
        find "$store" -maxdepth 1 -name "$version-*" ! -name "$version-$stamp" -exec rm -rf {} +
    fi
    site_link "$version"
done
# The stack's SGLang version is the one the lab host and molecule mount (read-only) at
# /opt/sglang-runtime/site-packages: $cache/site-packages points at its site-packages.
stack_version=$("${PYTHON:-$root/.venv/bin/python}" "$root/scripts/stack_var.py" stack_sglang_version)
if [ -d "$cache/$stack_version/venv" ]; then
    site=$("$cache/$stack_version/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    ln -sfn "$site" "$cache/site-packages"
fi
echo "sglang-runtime: $(ls -d "$cache"/*/venv 2>/dev/null | wc -l) runtime(s) in $cache"
