"""A running server: the health gate, what its log shows (evidence), the start canary and its tiny
models, the benchmark client and the per-release report."""
