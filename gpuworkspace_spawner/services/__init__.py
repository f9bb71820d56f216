"""Hub services and background workers (each runs as its own process)."""
