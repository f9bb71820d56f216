"""How `make test` splits the suite over its processes (tests/conftest.py)."""

from __future__ import annotations

import re

import pytest

from gpuworkspace_devcluster.addresses import INSTANCE_ENV

from .conftest import ORDER, SHARED_CLUSTER_PACKAGES, SPLIT_BY_MODULE, TESTS, group_of, worker_instance


def test_a_package_that_shares_one_stack_stays_in_one_process() -> None:
    assert group_of("tests/soak/test_waits.py::test_a") == group_of("tests/soak/test_chaos_soak.py::test_b")
    assert (
        group_of("tests/e2e_rbac/test_a.py::t")
        == group_of("tests/e2e_rbac/test_b.py::t[x]")
        == (2, "e2e_rbac")
    )


def test_the_e2e_modules_spread_over_the_processes_after_the_soak_and_before_the_rest() -> None:
    culler, jobs = group_of("tests/e2e/test_culler.py::test_a"), group_of("tests/e2e/test_jobs.py::test_b[x]")
    assert culler == (1, "tests/e2e/test_culler.py") and jobs == (1, "tests/e2e/test_jobs.py")
    assert (
        group_of("tests/soak/test_chaos_soak.py::t")[0] < culler[0] < group_of("tests/unit/test_x.py::t")[0]
    )


def test_every_other_module_is_a_group_of_its_own() -> None:
    a, b = group_of("tests/unit/test_a.py::test_1[p]"), group_of("tests/unit/test_a.py::T::test_2")
    assert a == b == (len(ORDER), "tests/unit/test_a.py")
    assert group_of("tests/unit/test_b.py::test_1") != a
    assert group_of("tests/test_packaging.py::test_1")[1] == "tests/test_packaging.py"


def test_every_package_scoped_stack_is_in_the_split() -> None:
    """A new package-scoped stack the split does not know would start once per module it has."""
    packages = {
        conftest.parent.name
        for conftest in TESTS.glob("*/conftest.py")
        if re.search(r"scope=\"package\"", conftest.read_text())
    }
    assert packages == {*SHARED_CLUSTER_PACKAGES, SPLIT_BY_MODULE} == set(ORDER)


def test_each_worker_gets_its_own_devcluster_instance() -> None:
    assert worker_instance({}) is None
    assert [worker_instance({"PYTEST_XDIST_WORKER": f"gw{n}"}) for n in range(3)] == [0, 1, 2]
    assert worker_instance({"PYTEST_XDIST_WORKER": "gw1", INSTANCE_ENV: "3"}) == 4
    with pytest.raises(pytest.UsageError, match="worker gw7: devcluster instance 7 is not one"):
        worker_instance({"PYTEST_XDIST_WORKER": "gw7"})
