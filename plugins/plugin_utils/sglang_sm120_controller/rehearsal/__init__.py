"""make rehearsal: the production build specs (build.py) and the release (release.py) run on a machine
without a GPU or git, against upstream's own build metadata (upstream.py)."""
