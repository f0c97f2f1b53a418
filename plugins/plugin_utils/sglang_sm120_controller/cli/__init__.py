"""The command-line tools (console scripts of pyproject.toml: cuda-arch, gpu-check, sglang-audit, sglang-compat,
sglang-evidence, sglang-flags, sglang-patch), each a main(argv) -> exit code and run() for the console script."""
