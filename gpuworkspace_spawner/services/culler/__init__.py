"""The idle culler hub service: pure policy (policy, model), the I/O shell around it."""
