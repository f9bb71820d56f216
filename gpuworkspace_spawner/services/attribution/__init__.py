"""GPU attribution: who uses which GPU, CPU and memory (pure core in this package, I/O in its shell)."""
