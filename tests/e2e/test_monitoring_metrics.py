"""Every metric the alerts and dashboards of helm-values/monitoring/ read is in a scrape of the services.

The real processes on the devcluster: the hub (``/hub/metrics``), the disk service and the attribution
service (their ``/metrics`` with a token that has ``read:metrics``), the reclaimer (its
``--metrics-listen``, at hub_config's ``GPUWS_RECLAIMER_METRICS_PORT``), the node agents, and Kueue's controller manager
(the devcluster's Kueue, found through Kueue's metrics Service as Prometheus finds it). A metric counts as served when
its family is in a scrape (a family without samples yet is still declared there with its type, so
a histogram ``x`` serves ``x_bucket``, ``x_count`` and ``x_sum``). The idle culler serves no metrics.
Only the kubelet's inode families, which the inode rule names as its dependency, are exempt.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helm.monitoring import EXTERNAL_METRICS, exposed_names, referenced_metrics

from .agents import start_agents
from .harness import HubStack, http, wait_for
from .test_disk_admin import disks  # noqa: F401 -- the disk service (proxied, or started next to the hub)
from .test_spawn_feedback import ensure_user, metric
from .test_workspace_lifecycle import kubectl

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]


def reclaimer_metrics_url(stack: HubStack) -> str:
    """The reclaimer's ``--metrics-listen`` (hub_config: ``GPUWS_RECLAIMER_METRICS_PORT``, a free port here)."""
    return f"http://127.0.0.1:{stack.hub.service_ports['RECLAIMER_METRICS']}/metrics"


def kueue_metrics_url(stack: HubStack) -> str:
    """Kueue's ``/metrics`` from the EndpointSlice of its metrics Service (kueue-system)."""
    raw = kubectl(stack, "get", "endpointslices", "-n", "kueue-system", "-o", "json").stdout
    (found,) = [
        s
        for s in json.loads(raw)["items"]
        if s["metadata"]["labels"].get("kubernetes.io/service-name")
        == "kueue-controller-manager-metrics-service"
    ]
    return f"http://{found['endpoints'][0]['addresses'][0]}:{found['ports'][0]['port']}/metrics"


def _families(url: str, token: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"token {token}"} if token else {}
    status, raw = http("GET", url, headers=headers)
    assert status == 200, f"GET {url}: {status} {raw[:200]!r}"
    return {f.name: f.type for f in text_string_to_metric_families(raw.decode())}


@pytest.fixture(scope="module")
def agents(stack: HubStack) -> Iterator[dict[str, str]]:
    dc = stack.devcluster
    with start_agents(dc.state_dir, dc.url, dc.kubeconfig, log_dir=stack.log_dir) as urls:
        yield urls


def test_every_metric_in_the_rules_and_dashboards_is_served(
    stack: HubStack,
    disks: tuple[str, float],  # noqa: F811
    agents: dict[str, str],
) -> None:
    if stack.hub.spawner != "gpuworkspace":
        pytest.skip("the services and metrics come with this project's spawner configuration")
    token = stack.admin_token
    # one real container start, so the phase histogram has samples (not only its declaration)
    ensure_user(stack, "watcher")
    stack.hub.start_server("watcher", "m", {"profile": "cpu-small"})
    stack.hub.wait_ready("watcher", "m")
    phases = {
        p: metric(stack, "gpuworkspace_spawn_phase_duration_seconds_count", phase=p)
        for p in ("prepare", "ready")
    }
    assert all(n >= 1 for n in phases.values()), phases
    stack.hub.stop_server("watcher", "m")
    reclaimer_metrics = reclaimer_metrics_url(stack)
    wait_for(lambda: http("GET", reclaimer_metrics)[0] == 200, 60, "the reclaimer's /metrics")
    scrapes = {
        "hub": _families(f"{stack.url}/hub/metrics", token),
        "gpuworkspace-disks": _families(disks[0] + "metrics", token),
        "gpuworkspace-attribution": _families(
            f"{stack.url}/services/gpuworkspace-attribution/metrics", token
        ),
        "gpuworkspace-reclaimer": _families(reclaimer_metrics),
        "kueue": _families(kueue_metrics_url(stack)),
    }
    for node, url in agents.items():
        scrapes[f"gpuworkspace-agent {node}"] = _families(url)
    served = set().union(*(exposed_names(families) for families in scrapes.values()))

    used = referenced_metrics()
    missing = {name: sorted(where) for name, where in used.items() if name not in served | EXTERNAL_METRICS}
    assert not missing, f"not served by any of {sorted(scrapes)}: {missing}"
    # every process contributes, so the check is not vacuous for any of them
    for process, families in scrapes.items():
        assert exposed_names(families) & set(used), f"{process}: no metric of it is used"
    assert {
        "gpuworkspace_spawn_phase_duration_seconds_bucket",
        "gpuworkspace_catalog_reload_failures_total",
    } <= served
    assert "gpuworkspace_reclaimer_pass_failures_total" in served
