"""helm-values/monitoring/: the alert rules and Grafana dashboards, read and checked as their consumers do.

Expressions are parsed with ``promql-parser`` (PyPI; Python bindings of GreptimeTeam's Rust port of
Prometheus' PromQL parser), after the interpolation Grafana does before it sends a query (dashboard
variables and ``$__rate_interval``-style built-ins). Every metric name an expression selects is what
the e2e test then looks for in a scrape of the running services.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import promql_parser
import yaml

from . import HELM, REPO

MONITORING = HELM / "monitoring"
HOWTO = REPO / "docs" / "how-to" / "alerts-and-dashboards.md"
RUNBOOK_BASE = "https://docs.example.org/gpuworkspace/how-to/alerts-and-dashboards.html#"
# Metrics of other components that a rule or panel may read: each is named in the rule's description
# or the panel's description, and in the how-to. The kubelet's volume stats families
# (kubernetes pkg/kubelet/metrics/collectors/volume_stats.go: volumeStatsInodesDesc, ...InodesUsedDesc).
EXTERNAL_METRICS = frozenset({"kubelet_volume_stats_inodes", "kubelet_volume_stats_inodes_used"})

# prometheus-operator's PrometheusRule CRD (monitoring.coreos.com/v1, RuleGroup and Rule).
GROUP_KEYS = frozenset(
    {"name", "labels", "interval", "query_offset", "limit", "rules", "partial_response_strategy"}
)
RULE_KEYS = frozenset({"record", "alert", "expr", "for", "keep_firing_for", "labels", "annotations"})
ANNOTATIONS = frozenset({"summary", "description", "runbook_url"})
SEVERITIES = frozenset({"critical", "warning", "info"})
DURATION = re.compile(
    r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
)

# Grafana's dashboard JSON model (the dashboard kind, schemaVersion 39): the keys a dashboard, a panel,
# a target and a template variable may have here, and those each must have.
DASHBOARD_REQUIRED = frozenset({"uid", "title", "schemaVersion", "panels", "templating", "time"})
DASHBOARD_KEYS = DASHBOARD_REQUIRED | frozenset(
    {"description", "tags", "editable", "graphTooltip", "version", "timezone", "refresh", "timepicker"}
    | {"links", "annotations", "id", "fiscalYearStartMonth", "liveNow", "weekStart"}
)
PANEL_REQUIRED = frozenset({"id", "type", "title", "gridPos", "targets", "datasource"})
PANEL_KEYS = PANEL_REQUIRED | frozenset({"description", "fieldConfig", "options", "transparent", "interval"})
PANEL_TYPES = frozenset({"timeseries", "stat", "bargauge", "gauge", "table", "barchart", "text"})
TARGET_KEYS = frozenset({"refId", "datasource", "expr", "legendFormat", "instant", "range", "format"})
VARIABLE_KEYS = frozenset(
    {"name", "label", "type", "query", "datasource", "definition", "includeAll", "multi", "allValue"}
    | {"current", "hide", "refresh", "options", "sort", "regex"}
)
VARIABLE_TYPES = frozenset({"datasource", "query", "custom", "interval", "constant"})
GRID = 24
# What Grafana substitutes before sending a query: built-ins (a sample value each) and, for the
# dashboard's own variables, the "All" value.
BUILTINS = {"__rate_interval": "5m", "__interval": "1m", "__range": "1d"}
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_]\w*)(?::\w+)?\}|([A-Za-z_]\w*))")  # "$1": a label_replace group
_LABEL_VALUES = re.compile(r"^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*(\w+)\s*\)$")


def documents() -> Iterator[tuple[Path, dict[str, Any]]]:
    for path in sorted(MONITORING.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                yield path, doc


def rules() -> list[dict[str, Any]]:
    return [
        rule
        for _, doc in documents()
        if doc["kind"] == "PrometheusRule"
        for group in doc["spec"]["groups"]
        for rule in group["rules"]
    ]


def dashboards() -> list[dict[str, Any]]:
    """Each dashboard's JSON, from the ConfigMaps labelled for Grafana's sidecar."""
    return [
        json.loads(text)
        for _, doc in documents()
        if doc["kind"] == "ConfigMap" and doc["metadata"].get("labels", {}).get("grafana_dashboard") == "1"
        for text in doc["data"].values()
    ]


def metric_names(expr: str) -> set[str]:
    """Every metric an expression selects; raises ValueError where it does not parse or where a
    selector has no metric name (it could match anything)."""
    names: set[str] = set()
    nameless: list[str] = []

    def visit(node: Any) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            else:
                nameless.append(str(node))
        return True

    promql_parser.walk(promql_parser.parse(expr), visit)
    if nameless:
        raise ValueError(f"a selector without a metric name: {nameless[0]} in {expr!r}")
    return names


def interpolate(expr: str, variables: Mapping[str, str], where: str) -> str:
    """The query Grafana sends: ``$var``/``${var}`` replaced; an unknown variable is an error."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name in BUILTINS:
            return BUILTINS[name]
        if name in variables:
            return variables[name]
        raise ValueError(f"{where}: unknown variable ${name} in {expr!r}")

    return _VARIABLE.sub(value, expr)


def dashboard_variables(dashboard: Mapping[str, Any]) -> dict[str, str]:
    """Each template variable's interpolated value for a query ("All": its allValue, else .*)."""
    out = {}
    for var in dashboard["templating"]["list"]:
        out[var["name"]] = "prometheus" if var["type"] == "datasource" else var.get("allValue", ".*")
    return out


def dashboard_queries(dashboard: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) for every panel target, after interpolation."""
    variables = dashboard_variables(dashboard)
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            where = f"{dashboard['uid']} panel {panel['id']} ({panel['title']}) {target['refId']}"
            yield where, interpolate(target["expr"], variables, where)


def variable_metrics(dashboard: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, metric) of each ``label_values(metric, label)`` query variable."""
    for var in dashboard["templating"]["list"]:
        if var["type"] != "query":
            continue
        query = var["query"]["query"] if isinstance(var["query"], Mapping) else var["query"]
        match = _LABEL_VALUES.match(query)
        if match is None:
            raise ValueError(
                f"{dashboard['uid']} variable {var['name']}: not label_values(metric, label): {query!r}"
            )
        yield f"{dashboard['uid']} variable {var['name']}", match.group(1)


def referenced_metrics() -> dict[str, set[str]]:
    """metric → where it is used (alert names, dashboard panels and variables)."""
    used: dict[str, set[str]] = {}
    for rule in rules():
        for name in metric_names(rule["expr"]):
            used.setdefault(name, set()).add(f"alert {rule['alert']}")
    for dashboard in dashboards():
        for where, query in dashboard_queries(dashboard):
            for name in metric_names(query):
                used.setdefault(name, set()).add(where)
        for where, name in variable_metrics(dashboard):
            used.setdefault(name, set()).add(where)
    return used


def exposed_names(families: Mapping[str, str]) -> set[str]:
    """The series names a scrape's families make selectable: a counter ``x`` as ``x_total``, a
    histogram as ``x_bucket``/``x_count``/``x_sum``; ``families`` maps family name → type."""
    suffixes = {
        "counter": ("_total",),
        "histogram": ("_bucket", "_count", "_sum"),
        "summary": ("_count", "_sum"),
    }
    out = set()
    for name, kind in families.items():
        out.add(name)
        out.update(name + s for s in suffixes.get(kind, ()))
    return out
