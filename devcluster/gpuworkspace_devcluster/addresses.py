"""The loopback ranges one devcluster uses, so that several run on one machine side by side.

Pods share the host's network here: the simulated kubelet gives each pod its own loopback address
(servers bind it, so every pod can use port 8888), node addresses are loopback too (the kubelet's and
dcgm-exporter's endpoints listen on them), and so are ClusterIPs (the simulated kube-proxy listens on
them). The API server, and everything the tests start beside it, listen on ports the OS picks.

A devcluster has an instance number, ``--instance`` or ``$GPUWS_DEVCLUSTER_INSTANCE`` (default 0), and
with it ranges of its own, disjoint from every other instance's:

- node ``n`` of the topology (its position in the file): InternalIP ``127.<o>.0.1`` and pods
  ``127.<o>.x.y``, where ``o = 10 + 10 * instance + n``;
- ClusterIPs: ``127.<96 + instance>.0.0/16``.

So instance 0 keeps the addresses a single devcluster always had, a topology has at most
:data:`NODES_PER_INSTANCE` nodes, and :data:`MAX_INSTANCES` devclusters fit on one machine.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

INSTANCE_ENV = "GPUWS_DEVCLUSTER_INSTANCE"
MAX_INSTANCES = 8
NODES_PER_INSTANCE = 10
_FIRST_NODE_OCTET = 10
_FIRST_SERVICE_OCTET = 96  # after the last instance's last node: 10 + 10 * 8 = 90 <= 96


def check_instance(instance: int, where: str = "instance") -> int:
    """``instance`` when it names one of the :data:`MAX_INSTANCES` ranges; else ``ValueError`` naming ``where``."""
    if isinstance(instance, bool) or not isinstance(instance, int) or not 0 <= instance < MAX_INSTANCES:
        raise ValueError(f"{where}: {instance!r} is not a devcluster instance (0 to {MAX_INSTANCES - 1})")
    return instance


def instance_from_env(environ: Mapping[str, str] | None = None) -> int:
    """The instance ``$GPUWS_DEVCLUSTER_INSTANCE`` names (0 when unset or empty)."""
    raw = (os.environ if environ is None else environ).get(INSTANCE_ENV, "").strip()
    if not raw:
        return 0
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(
            f"${INSTANCE_ENV}: {raw!r} is not a devcluster instance (0 to {MAX_INSTANCES - 1})"
        ) from None
    return check_instance(value, f"${INSTANCE_ENV}")


def node_octet(instance: int, index: int) -> int:
    """Second octet of node ``index``'s addresses in ``instance``: InternalIP ``127.<o>.0.1``, pods ``127.<o>.x.y``."""
    if not 0 <= index < NODES_PER_INSTANCE:
        raise ValueError(f"node {index}: a devcluster has at most {NODES_PER_INSTANCE} nodes")
    return _FIRST_NODE_OCTET + NODES_PER_INSTANCE * check_instance(instance) + index


def service_cidr(instance: int) -> str:
    """The ``--service-cluster-ip-range`` of ``instance``."""
    return f"127.{_FIRST_SERVICE_OCTET + check_instance(instance)}.0.0/16"
