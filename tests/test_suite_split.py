"""How `make test` splits the suite over its processes (tests/conftest.py)."""

from __future__ import annotations

import re

import pytest

from gpuworkspace_devcluster.addresses import INSTANCE_ENV

from .conftest import SHARED_CLUSTER_PACKAGES, TESTS, group_of, worker_instance


def test_a_package_that_shares_one_devcluster_stays_in_one_process_and_goes_first() -> None:
    assert group_of("tests/e2e/test_culler.py::test_a") == group_of("tests/e2e/test_jobs.py::test_b[x]")
    assert group_of("tests/e2e/test_culler.py::test_a") == (0, "e2e")
    assert group_of("tests/soak/test_waits.py::test_c")[0] < group_of("tests/unit/test_x.py::test_d")[0]


def test_every_other_module_is_a_group_of_its_own() -> None:
    a, b = group_of("tests/unit/test_a.py::test_1[p]"), group_of("tests/unit/test_a.py::T::test_2")
    assert a == b == (len(SHARED_CLUSTER_PACKAGES), "tests/unit/test_a.py")
    assert group_of("tests/unit/test_b.py::test_1") != a
    assert group_of("tests/test_packaging.py::test_1")[1] == "tests/test_packaging.py"


def test_every_package_scoped_fixture_is_in_a_shared_cluster_package() -> None:
    """A new package-scoped stack outside SHARED_CLUSTER_PACKAGES would start once per process it lands in."""
    packages = {
        conftest.parent.name
        for conftest in TESTS.glob("*/conftest.py")
        if re.search(r"scope=\"package\"", conftest.read_text())
    }
    assert packages == set(SHARED_CLUSTER_PACKAGES)


def test_each_worker_gets_its_own_devcluster_instance() -> None:
    assert worker_instance({}) is None
    assert [worker_instance({"PYTEST_XDIST_WORKER": f"gw{n}"}) for n in range(3)] == [0, 1, 2]
    assert worker_instance({"PYTEST_XDIST_WORKER": "gw1", INSTANCE_ENV: "3"}) == 4
    with pytest.raises(pytest.UsageError, match="worker gw7: devcluster instance 7 is not one"):
        worker_instance({"PYTEST_XDIST_WORKER": "gw7"})
