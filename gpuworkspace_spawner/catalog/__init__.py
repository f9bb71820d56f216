"""The versioned WorkspaceProfile catalog: model, loader and validation; no I/O beyond reading files."""
