"""helm-values/monitoring/: alert rules that load, dashboards Grafana's sidecar loads, runbooks that exist.

Every rule expression and dashboard query is parsed with a real PromQL parser (promql-parser); the
PrometheusRule is checked against the keys of prometheus-operator's CRD and the dashboards against
Grafana's dashboard JSON model, strictly (an unknown key is an error). That every metric name is
really exported is tests/e2e/test_monitoring_metrics.py (a scrape of the running services).
"""

from __future__ import annotations

import copy
import re
from collections import Counter
from typing import Any

import kubernetes_validate
import pytest

from . import REPO
from .monitoring import (
    ANNOTATIONS,
    DASHBOARD_KEYS,
    DASHBOARD_REQUIRED,
    DURATION,
    EXTERNAL_METRICS,
    GRID,
    GROUP_KEYS,
    HOWTO,
    PANEL_KEYS,
    PANEL_REQUIRED,
    PANEL_TYPES,
    RULE_KEYS,
    RUNBOOK_BASE,
    SEVERITIES,
    TARGET_KEYS,
    VARIABLE_KEYS,
    VARIABLE_TYPES,
    dashboard_queries,
    dashboards,
    documents,
    metric_names,
    referenced_metrics,
    rules,
    variable_metrics,
)

METRICS_DOC = REPO / "docs" / "reference" / "metrics.md"
# What issue 16 asks the alerts to cover, and the metric each one must read.
REQUIRED_ALERTS = {
    "GPUWorkspaceDiskAlmostFull": "gpuworkspace_disk_capacity_alert",
    "GPUWorkspaceDiskInodesAlmostFull": "kubelet_volume_stats_inodes_used",
    "GPUWorkspaceFencingNeeded": "jupyterhub_server_spawn_duration_seconds_count",
    "GPUWorkspaceReclaimFailing": "gpuworkspace_reclaimer_pass_failures_total",
    "GPUWorkspaceSpawnFailureRateHigh": "jupyterhub_server_spawn_duration_seconds_count",
    "GPUWorkspaceIdleAllocatedGPUHours": "gpuworkspace_gpu_idle_allocated_seconds_total",
    "GPUWorkspaceCatalogReloadFailed": "gpuworkspace_catalog_reload_failures_total",
    "GPUWorkspaceJobsWaitingForQuota": "kueue_pending_workloads",  # issue 17: queue wait and admission
}
REQUIRED_DASHBOARDS = {
    "gpuworkspace-gpu-attribution": "gpuworkspace_gpu_idle_allocated_seconds_total",
    "gpuworkspace-spawn-latency": "gpuworkspace_spawn_phase_duration_seconds_bucket",
    "gpuworkspace-disks": "gpuworkspace_disk_used_ratio",
    "gpuworkspace-jobs": "kueue_admission_wait_time_seconds_bucket",
}


def check_rule_object(doc: dict[str, Any]) -> None:
    """A PrometheusRule as prometheus-operator's CRD accepts it, with our annotations; raises ValueError."""
    top = {"apiVersion", "kind", "metadata", "spec"}
    if doc.get("apiVersion") != "monitoring.coreos.com/v1" or set(doc) != top:
        raise ValueError(f"not a monitoring.coreos.com/v1 PrometheusRule: {sorted(doc)}")
    if set(doc["spec"]) != {"groups"}:
        raise ValueError(f"spec: unknown keys {sorted(set(doc['spec']) - {'groups'})}")
    for group in doc["spec"]["groups"]:
        if extra := set(group) - GROUP_KEYS:
            raise ValueError(f"group {group.get('name')}: unknown keys {sorted(extra)}")
        for rule in group["rules"]:
            _check_rule(rule, f"group {group['name']} rule {rule.get('alert') or rule.get('record')}")


def _check_rule(rule: dict[str, Any], where: str) -> None:
    if extra := set(rule) - RULE_KEYS:
        raise ValueError(f"{where}: unknown keys {sorted(extra)}")
    if ("alert" in rule) == ("record" in rule) or not isinstance(rule.get("expr"), str):
        raise ValueError(f"{where}: needs exactly one of alert/record, and expr")
    for key in ("for", "keep_firing_for"):
        if key in rule and not DURATION.match(str(rule[key])):
            raise ValueError(f"{where}: {key} {rule[key]!r} is not a Prometheus duration")
    metric_names(rule["expr"])
    if "alert" in rule:
        if set(rule.get("annotations", {})) != ANNOTATIONS:
            raise ValueError(f"{where}: annotations must be exactly {sorted(ANNOTATIONS)}")
        if rule.get("labels", {}).get("severity") not in SEVERITIES:
            raise ValueError(f"{where}: severity must be one of {sorted(SEVERITIES)}")


def check_dashboard(dashboard: dict[str, Any]) -> None:
    """Grafana's dashboard JSON model, strictly; every query parses; raises ValueError."""
    uid = dashboard.get("uid", "?")
    if missing := DASHBOARD_REQUIRED - set(dashboard):
        raise ValueError(f"dashboard {uid}: missing {sorted(missing)}")
    if extra := set(dashboard) - DASHBOARD_KEYS:
        raise ValueError(f"dashboard {uid}: unknown keys {sorted(extra)}")
    if not isinstance(dashboard["schemaVersion"], int) or not 1 <= len(uid) <= 40:
        raise ValueError(f"dashboard {uid}: schemaVersion must be an integer, uid 1-40 characters")
    for var in dashboard["templating"]["list"]:
        if extra := set(var) - VARIABLE_KEYS:
            raise ValueError(f"dashboard {uid} variable {var.get('name')}: unknown keys {sorted(extra)}")
        if var.get("type") not in VARIABLE_TYPES:
            raise ValueError(f"dashboard {uid} variable {var.get('name')}: type {var.get('type')!r}")
    ids = Counter(p.get("id") for p in dashboard["panels"])
    if dupes := [i for i, n in ids.items() if n > 1]:
        raise ValueError(f"dashboard {uid}: panel ids used twice: {dupes}")
    for panel in dashboard["panels"]:
        _check_panel(panel, f"dashboard {uid} panel {panel.get('id')}")
    for _, query in dashboard_queries(dashboard):
        metric_names(query)
    list(variable_metrics(dashboard))


def _check_panel(panel: dict[str, Any], where: str) -> None:
    if missing := PANEL_REQUIRED - set(panel):
        raise ValueError(f"{where}: missing {sorted(missing)}")
    if extra := set(panel) - PANEL_KEYS:
        raise ValueError(f"{where}: unknown keys {sorted(extra)}")
    if panel["type"] not in PANEL_TYPES:
        raise ValueError(f"{where}: panel type {panel['type']!r}")
    grid = panel["gridPos"]
    if set(grid) != {"h", "w", "x", "y"} or grid["x"] + grid["w"] > GRID or min(grid.values()) < 0:
        raise ValueError(f"{where}: gridPos {grid} is not inside the 24-column grid")
    refs = [t.get("refId") for t in panel["targets"]]
    if not refs or len(set(refs)) != len(refs):
        raise ValueError(f"{where}: targets need distinct refIds")
    for target in panel["targets"]:
        if extra := set(target) - TARGET_KEYS:
            raise ValueError(f"{where} target {target.get('refId')}: unknown keys {sorted(extra)}")


# ------------------------------------------------------------------------------ the files
def test_every_file_has_a_header_comment_and_only_known_kinds() -> None:
    kinds = Counter(doc["kind"] for _, doc in documents())
    assert kinds == {"PrometheusRule": 1, "ConfigMap": 4}, kinds
    for path in {p for p, _ in documents()}:
        assert path.read_text().startswith("#"), f"{path}: say what it is for in a comment first"


@pytest.mark.parametrize(
    "doc", [pytest.param(d, id=d["metadata"]["name"]) for _, d in documents() if d["kind"] == "ConfigMap"]
)
def test_dashboard_configmaps_are_valid_and_labelled_for_the_grafana_sidecar(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, "1.33", strict=True)
    assert doc["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert all(key.endswith(".json") for key in doc["data"])


def test_the_rules_load() -> None:
    docs = [d for _, d in documents() if d["kind"] == "PrometheusRule"]
    for doc in docs:
        check_rule_object(doc)
        assert doc["metadata"]["labels"]["release"]  # kube-prometheus-stack's default ruleSelector
    names = [r["alert"] for r in rules()]
    assert len(names) == len(set(names)), names


def test_the_issue_s_alerts_exist_and_read_their_metric() -> None:
    by_name = {r["alert"]: r for r in rules()}
    for alert, metric in REQUIRED_ALERTS.items():
        assert alert in by_name, alert
        assert metric in metric_names(by_name[alert]["expr"]), (alert, metric)
    assert 'reason="fencing"' in by_name["GPUWorkspaceFencingNeeded"]["expr"]
    assert "by (reason)" in by_name["GPUWorkspaceSpawnFailureRateHigh"]["expr"]


@pytest.mark.parametrize("dashboard", [pytest.param(d, id=d["uid"]) for d in dashboards()])
def test_the_dashboards_load(dashboard: dict[str, Any]) -> None:
    check_dashboard(dashboard)


def test_the_issue_s_dashboards_exist() -> None:
    by_uid = {d["uid"]: d for d in dashboards()}
    for uid, metric in REQUIRED_DASHBOARDS.items():
        names = set().union(*(metric_names(q) for _, q in dashboard_queries(by_uid[uid])))
        assert metric in names, (uid, metric)


def test_every_runbook_url_points_at_a_section_of_the_how_to() -> None:
    text = HOWTO.read_text()
    targets = set(re.findall(r"^\((alert-[a-z0-9-]+)\)=$", text, flags=re.M))
    for rule in rules():
        url = rule["annotations"]["runbook_url"]
        assert url.startswith(RUNBOOK_BASE), url
        anchor = url.removeprefix(RUNBOOK_BASE)
        assert anchor == f"alert-{rule['alert'].lower()}", url
        assert anchor in targets, f"{HOWTO.name} has no ({anchor})= section for {rule['alert']}"
        assert f"`{rule['alert']}`" in text


def test_every_metric_used_is_documented() -> None:
    documented = METRICS_DOC.read_text()
    howto = HOWTO.read_text()
    for name, where in sorted(referenced_metrics().items()):
        base = re.sub(r"_(bucket|count|sum|total)$", "", name)
        if name in EXTERNAL_METRICS:
            assert f"`{name}`" in howto, f"{name} (used by {sorted(where)}) is not named in {HOWTO.name}"
        elif not base.startswith("jupyterhub_"):
            found = f"`{name}`" in documented or f"`{base}`" in documented
            assert found, f"{name} (used by {sorted(where)}) is not in metrics.md"


# ------------------------------------------------------------------------------ the checks can fail
RULE_BREAKS = [
    pytest.param(
        lambda r: r.update(expr="sum(rate(gpuworkspace_disk_used_ratio[5m])"), "parenthes", id="unclosed"
    ),
    pytest.param(lambda r: r.update(expr='{user="a"} > 0'), "without a metric name", id="nameless-selector"),
    pytest.param(lambda r: r.update(expresion="x"), "unknown keys", id="unknown-key"),
    pytest.param(lambda r: r.update({"for": "15 minutes"}), "duration", id="bad-for"),
    pytest.param(lambda r: r["annotations"].pop("runbook_url"), "annotations", id="no-runbook"),
    pytest.param(lambda r: r["labels"].update(severity="page"), "severity", id="bad-severity"),
]


@pytest.mark.parametrize(("change", "error"), RULE_BREAKS)
def test_the_rule_check_can_fail(change: Any, error: str) -> None:
    doc = copy.deepcopy(next(d for _, d in documents() if d["kind"] == "PrometheusRule"))
    change(doc["spec"]["groups"][0]["rules"][0])
    with pytest.raises(ValueError, match=error):
        check_rule_object(doc)


DASHBOARD_BREAKS = [
    pytest.param(
        lambda d: d["panels"][0]["targets"][0].update(expr="rate(x[5m]"), "parenthes", id="bad-query"
    ),
    pytest.param(
        lambda d: d["panels"][0]["targets"][0].update(expr="rate(x[$nope])"),
        "unknown variable",
        id="unknown-var",
    ),
    pytest.param(
        lambda d: d["panels"][0].update(gridPos={"h": 8, "w": 20, "x": 12, "y": 0}), "grid", id="grid"
    ),
    pytest.param(lambda d: d["panels"][0].update(datasrc={}), "unknown keys", id="panel-key"),
    pytest.param(lambda d: d.pop("schemaVersion"), "missing", id="no-schema-version"),
    pytest.param(lambda d: d["panels"][1].update(id=d["panels"][0]["id"]), "twice", id="duplicate-id"),
    pytest.param(lambda d: d["panels"][0].update(type="graph"), "panel type", id="old-graph-panel"),
]


@pytest.mark.parametrize(("change", "error"), DASHBOARD_BREAKS)
def test_the_dashboard_check_can_fail(change: Any, error: str) -> None:
    dashboard = copy.deepcopy(dashboards()[0])
    change(dashboard)
    with pytest.raises(ValueError, match=error):
        check_dashboard(dashboard)
