"""The SM120 build pipeline (specs as data, cache keys, detached builds, wheel verification) and the
ELF closure: whether every library a release installs loads on this host."""
