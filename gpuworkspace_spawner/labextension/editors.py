"""Which editors the workspace's profile declares for its image, for JupyterLab's launcher (pure).

The spawner sets ``$GPUWS_EDITORS`` from the catalog (``code-server,jupyterlab``: the editors the
profile's image declares, catalog/editors.py) in every workspace, container and VM. The server extension
hands it to the page as the page option ``gpuworkspaceEditors``; the front end (``launcher.ts``) adds
"Open VS Code" to the launcher exactly when it names ``code-server``. jupyter-server-proxy's own
launcher entries (jupyter-vscode-proxy's "VS Code", shown wherever that package is installed, whether or
not code-server is) are turned off by the image's configuration (``labconfig/page_config.json``,
docs/reference/image-contract.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

EDITORS_ENV = "GPUWS_EDITORS"  # the spawner's (manifests.conventions.EDITORS_ENV)
PAGE_OPTION = "gpuworkspaceEditors"
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,39}$")


def declared_editors(env: Mapping[str, str]) -> tuple[str, ...]:
    """The editors in ``$GPUWS_EDITORS``; anything that is not an editor's name is left out."""
    names = (n.strip() for n in env.get(EDITORS_ENV, "").split(","))
    return tuple(dict.fromkeys(n for n in names if _NAME.match(n)))


def page_options(env: Mapping[str, str]) -> dict[str, str]:
    """What the server extension adds to JupyterLab's page config."""
    return {PAGE_OPTION: ",".join(declared_editors(env))}
