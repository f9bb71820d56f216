"""The workspace inside JupyterLab: a jupyter_server extension and its prebuilt JupyterLab extension.

It runs in the single-user server only, never in the hub or the services. Its routes under the server's
base URL:

- ``GET gpuworkspace/api/status``: this workspace's GPU, CPU and memory figures from the attribution
  service, the idle culler's active warnings for this server, and the home disk's use; a service that is
  down is ``{"available": false, "reason": ...}``, never an error;
- ``GET gpuworkspace/api/history``: this workspace's last hour, for the usage panel's plots;
- ``POST gpuworkspace/api/activity``: "I'm still working", recorded as the server's own activity and
  reported to the hub, as jupyterhub-singleuser reports activity.

The front end (``jupyterlab-extension/``, TypeScript, prebuilt into ``jupyter-data/``) shows them as a
status-bar item and the culler's warnings as JupyterLab notifications with an "I'm still working" action.

The services are called with the server's own token ($JUPYTERHUB_API_TOKEN), which the hub grants
``access:services!service=<name>`` for them (hub_config/jupyterhub_config.py); they accept it for this
user's own workspaces only. ``jupyter-config/`` holds the configuration the workspace image installs
(docs/reference/image-contract.md): this extension enabled, and JupyterLab's news and update checks off.

:mod:`.figures` is pure; :mod:`.handlers` (tornado, jupyter_server) is imported only when the server loads
the extension.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CONFIG_DIR = Path(__file__).resolve().parent / "jupyter-config"  # a $JUPYTER_CONFIG_PATH entry
# a $JUPYTER_PATH entry: labextensions/@gpuworkspace/jupyterlab-status, the prebuilt front end
# (built from jupyterlab-extension/ by scripts/build-labextension.sh at set-up)
DATA_DIR = Path(__file__).resolve().parent / "jupyter-data"
FRONT_END = "@gpuworkspace/jupyterlab-status"


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": f"jupyter-data/labextensions/{FRONT_END}", "dest": FRONT_END}]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "gpuworkspace_spawner.labextension"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    from .handlers import setup_handlers  # noqa: PLC0415 -- tornado only inside the server

    setup_handlers(serverapp)
