"""kubernetes_asyncio imported lazily for the attribution service (gpuworkspace_spawner.services.lean_imports)."""

from __future__ import annotations

import json
import subprocess
import sys

from gpuworkspace_spawner.services.lean_imports import exports

PROBE = r"""
import json, sys
from gpuworkspace_spawner.services import lean_imports
installed = lean_imports.install()
import gpuworkspace_spawner.services.attribution.app  # everything the service imports
loaded_before = sorted(m for m in sys.modules if m.startswith("kubernetes_asyncio.client.models."))
from kubernetes_asyncio import client, config, watch
import asyncio

async def deserialize():
    async with client.ApiClient(client.Configuration(host="http://127.0.0.1:1")) as api_client:
        raw = type("R", (), {"data": json.dumps({"metadata": {"name": "p"}})})()
        return client.CoreV1Api(api_client).api_client.deserialize(raw, "V1Pod")

pod = asyncio.run(deserialize())
print(json.dumps({
    "installed": installed,
    "again": lean_imports.install(),
    "models_loaded_by_the_service": loaded_before,
    "pod": pod.metadata.name,
    "names": [client.V1Pod.__name__, client.models.V1Node.__name__, client.ApiException.__name__,
              config.ConfigException.__name__, watch.Watch.__name__],
    "version": __import__("kubernetes_asyncio").__version__,
    "modules": sum(1 for m in sys.modules if m.startswith("kubernetes_asyncio")),
}))
"""


def test_the_service_imports_none_of_the_generated_models_and_every_name_still_works() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    assert got["installed"] is True and got["again"] is False
    # KubeSpawner's objects module (reached through kubespawner.clients) imports its ~40 models itself
    assert 0 < len(got["models_loaded_by_the_service"]) < 60  # of ~800 the eager package loads
    assert got["pod"] == "p"  # ApiClient.deserialize finds models through the lazy package
    assert got["names"] == ["V1Pod", "V1Node", "ApiException", "ConfigException", "Watch"]
    assert got["version"]  # constants of the real __init__ are copied
    assert got["modules"] < 150  # the eager package imports ~900


def test_exports_reads_imports_and_constants_without_running_them() -> None:
    names, constants = exports(
        "from __future__ import absolute_import\n"
        '__version__ = "1.2"\n__all__ = ["a", "b"]\n'
        "import pkg.client as client\nimport os\n"
        "from pkg.client.api.core import CoreApi\nfrom pkg.x import y as z\nraise SystemExit('not run')\n"
    )
    assert names == {
        "client": ("pkg.client", None),
        "CoreApi": ("pkg.client.api.core", "CoreApi"),
        "z": ("pkg.x", "y"),
    }
    assert constants == {"__version__": "1.2", "__all__": ["a", "b"]}


def test_the_attribution_service_does_not_import_the_catalog_loader() -> None:
    """It needs catalog.units only; the loader's jsonschema builds a URI grammar (~12 MiB, 0.8 s)."""
    code = (
        "import sys\n"
        "from gpuworkspace_spawner.services import lean_imports\n"
        "lean_imports.install()\n"
        "import gpuworkspace_spawner.services.attribution.app\n"
        "print(sorted(m for m in ('jsonschema', 'lark', 'gpuworkspace_spawner.catalog.loading') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
