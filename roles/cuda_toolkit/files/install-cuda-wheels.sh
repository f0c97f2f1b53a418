#!/bin/sh
# Lay NVIDIA's CUDA component wheels out as an ordinary toolkit tree, all or nothing.
#
#   install-cuda-wheels.sh PYTHON WHEELHOUSE DEST VERSION SPEC...
#
# PYTHON      an interpreter with pip (a throwaway venv is fine)
# WHEELHOUSE  directory of wheels to install from with --no-index, or "" for pip's configured index
# DEST        final directory, e.g. /opt/cuda-toolkit-wheels/13.0.1; must not exist yet
# VERSION     the CUDA version recorded in DEST/toolkit/version.json, e.g. 13.0.1
# SPEC        pip requirement(s), e.g. 'cuda-toolkit[nvcc,cudart,crt,nvvm,cccl]==13.0.1'
#
# Everything is assembled in DEST.partial and renamed to DEST only when nvcc is in place,
# so an interrupted or failed install leaves nothing that looks installed.
set -eu

if [ "$#" -lt 5 ]; then
    echo "usage: $0 PYTHON WHEELHOUSE DEST VERSION SPEC..." >&2
    exit 2
fi
python=$1 wheelhouse=$2 dest=$3 version=$4
shift 4

if [ -e "$dest" ]; then
    echo "install-cuda-wheels: $dest already exists; remove it first to reinstall" >&2
    exit 1
fi
major=${version%%.*}
partial="$dest.partial"
rm -rf "$partial"
trap 'rm -rf "$partial"' EXIT INT TERM
mkdir -p "$partial"

if [ -n "$wheelhouse" ]; then
    "$python" -m pip install --disable-pip-version-check --no-cache-dir --no-compile \
        --no-index --find-links "$wheelhouse" --target "$partial/site" "$@"
else
    "$python" -m pip install --disable-pip-version-check --no-cache-dir --no-compile \
        --target "$partial/site" "$@"
fi

tree="$partial/site/nvidia/cu$major"
if [ ! -x "$tree/bin/nvcc" ]; then
    echo "install-cuda-wheels: the wheels installed no nvcc under nvidia/cu$major (specs: $*)" >&2
    exit 1
fi
# nvcc's profile links against TOP/lib64, the wheels ship lib/.
[ -e "$tree/lib64" ] || ln -s lib "$tree/lib64"

mkdir "$partial/toolkit"
for part in bin include lib nvvm; do
    ln -s "../site/nvidia/cu$major/$part" "$partial/toolkit/$part"
done
ln -s lib "$partial/toolkit/lib64"
specs_json=$(printf '"%s", ' "$@" | sed 's/, $//')
cat > "$partial/toolkit/version.json" <<JSON
{
  "cuda": {"name": "CUDA SDK", "version": "$version"},
  "installed_from": "wheels",
  "wheel_specs": [$specs_json]
}
JSON
mv "$partial" "$dest"
trap - EXIT INT TERM
echo "install-cuda-wheels: CUDA $version installed in $dest/toolkit"
