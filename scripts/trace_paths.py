"""Count the distinct package files two traces cross (issue 19; docs/explanation/architecture.md).

Run from a checkout, with its package first on the path:
``PYTHONPATH=$PWD:$PWD/devcluster .venv/bin/python scripts/trace_paths.py hub_config/catalog``.
No cluster is needed: KubeSpawner's client, its reflectors and the custom-object patch are faked.

slug: from ``load_user_options()`` (the spawn form's user_options) to ``get_pod_manifest()``'s pod.
vm-stop: from ``Spawner.stop()`` to the KubeVirt ``runStrategy: Halted`` patch.
A file counts when a function defined in it is called (sys.setprofile) inside the trace.
"""

import asyncio
import os
import sys
from types import SimpleNamespace

import kubespawner.spawner
from kubernetes_asyncio.client import ApiClient, CoreV1Api

kubespawner.spawner.load_config = lambda **_: None
kubespawner.spawner.shared_client = lambda *_a, **_k: CoreV1Api(ApiClient())

from kubespawner import KubeSpawner  # noqa: E402

import gpuworkspace_spawner  # noqa: E402
from gpuworkspace_spawner.k8s import custom, gateway  # noqa: E402
from gpuworkspace_spawner.spawner import GPUWorkspaceSpawner  # noqa: E402

PKG = os.path.dirname(gpuworkspace_spawner.__file__) + os.sep
seen: list[str] = []


def _profile(frame, event, arg):
    if event == "call" and frame.f_code.co_filename.startswith(PKG):
        name = frame.f_code.co_filename[len(PKG) :]
        if name not in seen:
            seen.append(name)


class Reflector:
    def __init__(self):
        self.resources = {}
        self.pods = self.objects = self.resources


REFLECTORS = {}


async def start_reflector(spawner, kind, reflector_class, **_):
    return REFLECTORS.setdefault(spawner._get_reflector_key(kind), Reflector())


KubeSpawner._start_reflector = start_reflector
GPUWorkspaceSpawner.reflectors = REFLECTORS
stop_files: list[str] = []


async def patch(api, kind, ns, name, body, **_):
    if kind.plural == "virtualmachines" and not stop_files:
        stop_files.extend(seen)
    return {}


async def event(*_a, **_k):
    return {}


custom.custom_api = lambda: None
custom.patch = patch
gateway.create_event = event


def spawner(catalog):
    user = SimpleNamespace(
        name="ann",
        groups=[],
        url="/user/ann/",
        id=1,
        escaped_name="ann",
        orm_user=SimpleNamespace(name="ann", api_tokens=[]),
    )
    orm = SimpleNamespace(name="v1", server=None)
    return GPUWorkspaceSpawner(
        _mock=True, user=user, orm_spawner=orm, namespace="ws", audit_events="none", catalog_path=catalog
    )


async def main(catalog):
    s = spawner(catalog)
    assert s.catalog  # loaded before the trace: the catalog's own reading is not the slug's path
    s.user_options = {"profile": "cpu-small", "ide": "jupyterlab"}
    sys.setprofile(_profile)
    await s.load_user_options()
    await s.get_pod_manifest()
    sys.setprofile(None)
    print("slug", len(seen), sorted(seen))
    seen.clear()
    s = spawner(catalog)
    s.load_state(
        {
            "pod_name": "jupyter-ann--v1",
            "namespace": "ws",
            "pvc_name": "ws-ann--v1",
            "gpuworkspace": {
                "runtime": "vm",
                "profile": "vm-workstation",
                "catalog_version": "c1",
                "ide": "jupyterlab",
            },
        }
    )
    sys.setprofile(_profile)
    await s.stop()
    sys.setprofile(None)
    print("vm-stop", len(stop_files), sorted(stop_files))


asyncio.run(main(sys.argv[1]))
