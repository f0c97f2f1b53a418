"""More than one GPU host: SGLang's own router in front of the workers (its admin API), and a worker's
in-flight requests (the drain before a worker is upgraded)."""
