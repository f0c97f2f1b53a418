#!/usr/bin/env bash
# Debian's Prometheus packages on the controller, for offline hosts and for the rule tests:
#
#   .cache/monitoring-debs/<suite>/*.deb      prometheus, prometheus-node-exporter and every package
#                                             they need that a Debian install may lack (their
#                                             dependency closure less Priority: required), as
#                                             `apt-get download` fetches them from the controller's
#                                             own apt sources (Debian's mirror, never named here)
#   .cache/monitoring-debs/<suite>/Packages   the index that makes the folder a flat apt repository
#                                             (role sglang_monitoring, sglang_monitoring_debs_dir)
#   .cache/monitoring-debs/<suite>/repo.tar   the same packages and index in one file, which the role
#                                             copies to a host (one transfer, not one per package)
#   .cache/promtool/bin/promtool              promtool and prometheus, unpacked from that package
#   .cache/promtool/bin/prometheus            (tests/test_monitoring_*.py: promtool test rules, and a
#                                             Prometheus on 127.0.0.1 scraping the stand-in)
#
# <suite> is the controller's Debian release (bookworm on CI: Prometheus 2.42). Redone only when the
# controller's candidate versions change (a stamp holds them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${SGLANG_TOOLKIT_CACHE:-$root/.cache}
packages=(prometheus prometheus-node-exporter)

if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
    echo "monitoring-debs: needs a Debian controller (apt-get, dpkg-deb) to fetch Debian's prometheus package" >&2
    exit 1
fi
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-unknown}")
dest="$cache/monitoring-debs/$suite"
promtool_dir="$cache/promtool"

candidates() {
    apt-cache policy "${packages[@]}" | awk '/^[^ ]/ {name=$1} /Candidate:/ {print name, $2}'
}
if [ "$(candidates | grep -c '(none)' || true)" != 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq
    fi
    if [ "$(candidates | grep -c '(none)' || true)" != 0 ]; then
        echo "monitoring-debs: apt offers no candidate for: $(candidates | awk '$2 == "(none)" {print $1}' | xargs); run apt-get update" >&2
        exit 1
    fi
fi
stamp=$(candidates | sha256sum | cut -c1-16)

if [ "$(cat "$dest/.stamp" 2>/dev/null || true)" != "$stamp" ]; then
    echo "monitoring-debs: downloading ${packages[*]} and their dependencies for $suite"
    work="$dest.partial"
    rm -rf "$work"
    mkdir -p "$work"
    closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
        --no-replaces --no-enhances "${packages[@]}" | grep -v '^ ' | grep -v '^<' | sort -u)
    wanted=()
    for name in $closure; do
        priority=$(apt-cache show --no-all-versions "$name" 2>/dev/null | awk '/^Priority:/ {print $2; exit}')
        [ "$priority" = required ] || wanted+=("$name")
    done
    (cd "$work" && apt-get download -qq "${wanted[@]}" >/dev/null)
    # A flat repository: one stanza per package, its control fields plus where and what it is.
    for deb in "$work"/*.deb; do
        dpkg-deb -f "$deb"
        echo "Filename: ./$(basename "$deb")"
        echo "Size: $(stat -c %s "$deb")"
        echo "SHA256: $(sha256sum "$deb" | cut -d' ' -f1)"
        echo
    done >"$work/Packages"
    echo "$stamp" >"$work/.stamp"
    rm -rf "$dest"
    mv "$work" "$dest"
fi

if [ ! -e "$dest/repo.tar" ] || [ "$dest/Packages" -nt "$dest/repo.tar" ]; then
    (cd "$dest" && tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf repo.tar.partial Packages ./*.deb)
    mv "$dest/repo.tar.partial" "$dest/repo.tar"
fi

prometheus_deb=$(ls "$dest"/prometheus_*.deb | head -n1)
if [ ! -x "$promtool_dir/bin/promtool" ] || [ ! -x "$promtool_dir/bin/prometheus" ] || [ "$(cat "$promtool_dir/.from" 2>/dev/null || true)" != "$(basename "$prometheus_deb")" ]; then
    rm -rf "$promtool_dir"
    unpacked=$(mktemp -d)
    trap 'rm -rf "$unpacked"' EXIT
    dpkg-deb -x "$prometheus_deb" "$unpacked"
    mkdir -p "$promtool_dir/bin"
    cp "$unpacked/usr/bin/promtool" "$unpacked/usr/bin/prometheus" "$promtool_dir/bin/"
    basename "$prometheus_deb" >"$promtool_dir/.from"
fi
echo "monitoring-debs: $(ls "$dest"/*.deb | wc -l) packages in $dest; $("$promtool_dir/bin/promtool" --version 2>&1 | head -n1)"
