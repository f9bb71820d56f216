"""gpuworkspace-spawner: GPU development workspaces on Kubernetes for JupyterHub.

Public surface: :class:`GPUWorkspaceSpawner` (entry point ``gpuworkspace`` in ``jupyterhub.spawners``)
and :func:`load_catalog_or_exit` for ``jupyterhub_config.py``. Both are imported lazily, so importing
the package (e.g. for the devcluster) does not import JupyterHub or KubeSpawner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0.dev0"
__all__ = ["GPUWorkspaceSpawner", "load_catalog_or_exit"]

if TYPE_CHECKING:
    from .spawner import GPUWorkspaceSpawner, load_catalog_or_exit


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import spawner  # noqa: PLC0415 - lazy: keeps `import gpuworkspace_spawner` light

        return getattr(spawner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
