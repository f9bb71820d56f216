"""What every test process shares: its own devcluster instance, and how `make test` splits the suite.

`make test` runs the suite in several processes (pytest-xdist, ``-n $TEST_WORKERS``, three by default). Each runs its devclusters in
an instance of its own (``$GPUWS_DEVCLUSTER_INSTANCE``: its own loopback ranges for pods, nodes and
ClusterIPs, gpuworkspace_devcluster/addresses.py), so two of them never collide on an address; every
other port the tests open is a free one the OS picks, or one of its instance's block (tests/e2e/harness.py).

The work is handed out in groups (``--dist loadscope``, with the scopes of :class:`ByCluster`): a
package whose tests share one stack (a package-scoped fixture: the least-privilege stack, the soak) is
one group, so its stack starts once; every other module is a group of its own, so a module-scoped
devcluster starts once too. The e2e package is split by module: each process that takes e2e modules
starts its own e2e hub stack for them. The groups that take longest are handed out first, so that no
process is left with one long group at the end while the others wait.
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
# Packages whose tests share a package-scoped stack. Each of these is one group, so its stack starts
# once; tests/e2e is split by module instead, so that its modules (about half of the suite's serial
# time) spread over the processes: each process that takes e2e modules starts one e2e stack, and runs
# them one after another while it lasts. In this order, longest first: the bounded soak alone takes
# about 7 minutes.
SHARED_CLUSTER_PACKAGES = ("soak", "e2e_rbac", "e2e_limits")
SPLIT_BY_MODULE = "e2e"
ORDER = ("soak", SPLIT_BY_MODULE, "e2e_rbac", "e2e_limits")


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
    """(rank, group) of a test: a shared-stack package is one group, any other module one of its own;
    the ranks put the soak first, then the e2e modules, the other shared-stack packages, the rest."""
    parts = nodeid.split("::", 1)[0].split("/")
    package = parts[1] if parts[0] == TESTS.name and len(parts) > 2 else ""
    module = "/".join(parts)
    if package in SHARED_CLUSTER_PACKAGES:
        return ORDER.index(package), package
    if package == SPLIT_BY_MODULE:
        return ORDER.index(package), module
    return len(ORDER), module


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return  # one process: the order is the collection's
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
