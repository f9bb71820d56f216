"""gpuworkspace-spawner: GPU development workspaces on Kubernetes for JupyterHub."""

__version__ = "0.1.0.dev0"
