"""What a hub-managed service needs from the hub pod's environment to reach Kubernetes.

JupyterHub starts a managed service (one with a ``command``) with a minimal environment: ``PATH``,
``LANG`` and the rest of ``Spawner.env_keep``, its own ``JUPYTERHUB_*`` variables and the service's
``environment``. ``KUBERNETES_SERVICE_HOST`` and ``KUBERNETES_SERVICE_PORT``, which the kubelet sets in
the hub pod and from which a Kubernetes client finds the API server in-cluster, are not among them: a
managed service that talks to Kubernetes fails to load its in-cluster configuration (and finds no
kubeconfig either). :func:`pass_in_cluster_environment` copies them into each managed service's
``environment``; the ServiceAccount token and CA are files (the pod's mounted ServiceAccount), which a
child process reads like the hub does.

Pure: the hub configuration (``hub_config/jupyterhub_config.py``, the z2jh values' ``extraConfig``)
calls it with ``os.environ`` and its service list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

IN_CLUSTER_VARIABLES = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")


def in_cluster_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The in-cluster API server variables of ``environ`` ({} outside a pod, where neither is set).

    Half of them is a misconfigured pod, not "outside a cluster": that raises, naming the missing one.
    """
    found = {name: environ[name] for name in IN_CLUSTER_VARIABLES if environ.get(name)}
    missing = [name for name in IN_CLUSTER_VARIABLES if name not in found]
    if found and missing:
        raise ValueError(
            f"{', '.join(found)} is set but {', '.join(missing)} is not: the hub pod's environment names "
            "half of the Kubernetes API server, so its managed services could not reach it"
        )
    return found


def pass_in_cluster_environment(
    services: Sequence[Mapping[str, Any]], environ: Mapping[str, str]
) -> list[dict[str, Any]]:
    """``services`` (JupyterHub.services entries) with the in-cluster variables added to the
    ``environment`` of every managed one (with a ``command``). A value the service sets itself wins;
    external services (no ``command``) are returned unchanged."""
    variables = in_cluster_environment(environ)
    out = []
    for service in services:
        copied = dict(service)
        if variables and copied.get("command"):
            copied["environment"] = {**variables, **(copied.get("environment") or {})}
        out.append(copied)
    return out
