"""``gpuworkspace-jobs``: submit, list, read, follow and cancel jobs handed off from workspaces (issue 17)."""
