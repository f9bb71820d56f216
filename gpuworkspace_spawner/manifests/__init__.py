"""Pure manifest builders (``build_*``): frozen dataclasses in, plain Kubernetes dicts out; no I/O."""
