"""The toolkit's code that runs only on the controller, never shipped to a host: it may use PyYAML,
packaging and matplotlib. It imports the host package as ``sglang_sm120``.

    rehearsal/       make rehearsal: the production build specs and the release, run without a GPU
    pinned_stack.py  the stack an SGLang release pins (the sglang_release_stack lookup)
    compat.py        sglang-compat: is a release usable for this stack
    flag_gate.py     sglang-flags: SGLang's own ServerArgs and the start gate on a flag set
    chart.py         the benchmark report's chart
"""
