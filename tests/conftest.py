"""What every test process shares: its own devcluster instance, and how `make test` splits the suite.

`make test` runs the suite in several processes (pytest-xdist, ``-n``). Each runs its devclusters in
an instance of its own (``$GPUWS_DEVCLUSTER_INSTANCE``: its own loopback ranges for pods, nodes and
ClusterIPs, gpuworkspace_devcluster/addresses.py), so two of them never collide on an address; every
other port the tests open is a free one the OS picks.

The work is handed out in groups (``--dist loadscope``, with the scopes of :class:`ByCluster`): a package whose tests share one devcluster (a
package-scoped fixture: the e2e hub stack, the least-privilege stack, the soak) is one group, so its
devcluster starts once; every other module is a group of its own, so a module-scoped devcluster starts
once too. The groups that take longest are handed out first, so that no process is left with one
long group at the end while the others wait.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

from gpuworkspace_devcluster.addresses import INSTANCE_ENV, MAX_INSTANCES, instance_from_env

TESTS = Path(__file__).parent
# Packages whose tests share a package-scoped devcluster, longest first (serial wall time on the
# 2-core CI machine, from `make test`'s junit report).
SHARED_CLUSTER_PACKAGES = ("e2e", "soak", "e2e_rbac", "e2e_limits")


def worker_instance(environ: Mapping[str, str]) -> int | None:
    """The devcluster instance of the pytest-xdist worker ``environ`` names (``gw<n>``: the base
    ``$GPUWS_DEVCLUSTER_INSTANCE`` plus ``n``); None outside xdist."""
    worker = environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return None
    instance = instance_from_env(environ) + int(worker[2:])
    if instance >= MAX_INSTANCES - 1:  # the last is kept for tests/devcluster/sim/test_instances.py
        raise pytest.UsageError(
            f"pytest-xdist worker {worker}: devcluster instance {instance} is not one a test process "
            f"may use (0 to {MAX_INSTANCES - 2}); run fewer workers or a lower ${INSTANCE_ENV}"
        )
    return instance


if (_instance := worker_instance(os.environ)) is not None:
    os.environ[INSTANCE_ENV] = str(_instance)


def group_of(nodeid: str) -> tuple[int, str]:
    """(rank, group) of a test: the shared-cluster packages first, in their order; then each module."""
    parts = nodeid.split("::", 1)[0].split("/")
    if parts[0] == TESTS.name and len(parts) > 2 and parts[1] in SHARED_CLUSTER_PACKAGES:
        return SHARED_CLUSTER_PACKAGES.index(parts[1]), parts[1]
    return len(SHARED_CLUSTER_PACKAGES), "/".join(parts)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # stable: within a group, and among the modules, the collection order is kept
    items.sort(key=lambda item: group_of(item.nodeid)[0])


class ByCluster(LoadScopeScheduling):
    """``--dist loadscope``, with a scope per group of :func:`group_of` and the scopes in collection order.

    (Not xdist's ``loadgroup`` with ``xdist_group`` marks: pytest-xdist 3.8 renames the node ids of
    marked tests through ``Item._nodeid``, which pytest 9.2 no longer reads, so the marks group nothing.)
    """

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False  # keep the longest groups first, as sorted above

    def _split_scope(self, nodeid: str) -> str:
        return group_of(nodeid)[1]


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadScopeScheduling | None:
    return ByCluster(config, log) if config.getvalue("dist") == "loadscope" else None
