"""What the server runs: the launch plan, its flags, SGLang's own ServerArgs check and the catalogue
of known start failures (the start gate)."""
