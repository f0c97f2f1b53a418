#!/usr/bin/env bash
# This checkout as the collection sm120.sglang for Ansible: ansible.cfg's collections_path names
# .collections (per checkout, never under a shared .cache), where ansible_collections/sm120/sglang is a
# link to the checkout, so the playbooks,
# molecule and the tests run the tree as it is (the built and installed collection is tested apart:
# tests/integration/test_collection.py).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
link="$root/.collections/ansible_collections/sm120/sglang"
mkdir -p "$(dirname "$link")"
if [ "$(readlink "$link" 2>/dev/null)" != "$root" ]; then
    rm -rf "$link"
    ln -s "$root" "$link"
fi
