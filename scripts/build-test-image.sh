#!/usr/bin/env bash
# Build the systemd test-host images from Debian packages (debootstrap + docker import).
# No registry is needed. Each image is tagged with a hash of its recipe (this script,
# molecule/images/packages.txt, the suite) and rebuilt only when that hash changes.
#
#   scripts/build-test-image.sh SUITE...      e.g. bookworm trixie
# Prints nothing but progress; the images are sglang-testhost:SUITE.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
packages_file="$here/molecule/images/packages.txt"
packages=$(grep -v '^\s*#' "$packages_file" | xargs | tr ' ' ',')

mirror() {
    local uri=""
    if [ -r /etc/apt/sources.list.d/debian.sources ]; then
        uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
    fi
    if [ -z "$uri" ] && [ -r /etc/apt/sources.list ]; then
        uri=$(awk '$1 == "deb" && $0 !~ /security/ {print ($2 ~ /^\[/ ? $3 : $2); exit}' /etc/apt/sources.list)
    fi
    if [ -z "$uri" ]; then
        echo "build-test-image: cannot find a Debian mirror in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list; set DEBIAN_MIRROR" >&2
        exit 1
    fi
    echo "$uri"
}

if ! command -v debootstrap >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    else
        echo "build-test-image: debootstrap is missing; install it (apt-get install debootstrap) and run again" >&2
        exit 1
    fi
fi

for suite in "$@"; do
    recipe_hash=$( { cat "$0" "$packages_file"; echo "$suite"; } | sha256sum | cut -c1-12)
    tag="sglang-testhost:$suite-$recipe_hash"
    if docker image inspect "$tag" >/dev/null 2>&1; then
        docker tag "$tag" "sglang-testhost:$suite"
        echo "build-test-image: $tag is up to date"
        continue
    fi
    rootfs=$(mktemp -d /var/tmp/sglang-testhost-XXXXXX)
    trap 'rm -rf "$rootfs"' EXIT
    echo "build-test-image: debootstrap $suite (about a minute)"
    if ! debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" "${DEBIAN_MIRROR:-$(mirror)}" >"$rootfs.log" 2>&1; then
        tail -n 20 "$rootfs.log" >&2
        echo "build-test-image: debootstrap of $suite failed (full log: $rootfs.log)" >&2
        exit 1
    fi
    rm -f "$rootfs.log"
    # A container has no consoles; a fresh machine-id per container; no downloaded .debs in the image.
    chroot "$rootfs" systemctl mask getty@tty1.service serial-getty@.service systemd-firstboot.service >/dev/null 2>&1 || true
    : >"$rootfs/etc/machine-id"
    # Test hosts are offline: no apt source they cannot reach (what they install comes from the controller).
    echo "# offline test host: packages come from the controller" >"$rootfs/etc/apt/sources.list"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb
    tar -C "$rootfs" -c . | docker import -c 'CMD ["/lib/systemd/systemd"]' - "$tag" >/dev/null
    docker tag "$tag" "sglang-testhost:$suite"
    rm -rf "$rootfs"
    trap - EXIT
    echo "build-test-image: built $tag"
done
