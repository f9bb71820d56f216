"""Label and field selectors: grammar, matching and error messages as the real API server has them."""

from __future__ import annotations

from typing import Any

import pytest

from gpuworkspace_devcluster.errors import ApiError
from gpuworkspace_devcluster.resources import ResourceType, find
from gpuworkspace_devcluster.selectors import (
    LabelSelector,
    label_selector_from_object,
    parse_field_selector,
    parse_label_selector,
)


def _rt(group: str, version: str, plural: str) -> ResourceType:
    rt = find(group, version, plural)
    assert rt is not None
    return rt


PODS = _rt("", "v1", "pods")
NODES = _rt("", "v1", "nodes")
EVENTS = _rt("", "v1", "events")
NEW_EVENTS = _rt("events.k8s.io", "v1", "events")
SECRETS = _rt("", "v1", "secrets")
NAMESPACES = _rt("", "v1", "namespaces")
SERVICES = _rt("", "v1", "services")
CONFIGMAPS = _rt("", "v1", "configmaps")
PVS = _rt("", "v1", "persistentvolumes")
VMS = _rt("kubevirt.io", "v1", "virtualmachines")
NETWORKFENCES = _rt("csiaddons.openshift.io", "v1alpha1", "networkfences")

LABELS = {"app": "web", "tier": "frontend", "version": "3", "example.com/team": "gpu"}


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        pytest.param("", LABELS, True, id="empty-matches-everything"),
        pytest.param("   ", None, True, id="blank-selector-unlabelled-object"),
        pytest.param("app=web", LABELS, True, id="equals"),
        pytest.param("app==web", LABELS, True, id="double-equals"),
        pytest.param("app=db", LABELS, False, id="equals-other-value"),
        pytest.param("app=web", None, False, id="equals-no-labels"),
        pytest.param("app!=db", LABELS, True, id="not-equals"),
        pytest.param("app!=web", LABELS, False, id="not-equals-same-value"),
        pytest.param("missing!=x", LABELS, True, id="not-equals-matches-absent-key"),
        pytest.param("app in (web,db)", LABELS, True, id="in"),
        pytest.param("app in (db)", LABELS, False, id="in-miss"),
        pytest.param("missing in (a)", LABELS, False, id="in-absent-key"),
        pytest.param("app notin (db,cache)", LABELS, True, id="notin"),
        pytest.param("app notin (web)", LABELS, False, id="notin-miss"),
        pytest.param("missing notin (a)", LABELS, True, id="notin-matches-absent-key"),
        pytest.param("app", LABELS, True, id="exists"),
        pytest.param("missing", LABELS, False, id="exists-miss"),
        pytest.param("!missing", LABELS, True, id="does-not-exist"),
        pytest.param("!app", LABELS, False, id="does-not-exist-miss"),
        pytest.param("app=web,tier=frontend", LABELS, True, id="and"),
        pytest.param("app=web,tier=backend", LABELS, False, id="and-one-fails"),
        pytest.param("  app = web ,  tier in ( frontend , x )  ,!gone ", LABELS, True, id="whitespace"),
        pytest.param("example.com/team=gpu", LABELS, True, id="prefixed-key"),
        pytest.param("app=", {"app": ""}, True, id="empty-value"),
        pytest.param("app in (,x)", {"app": ""}, True, id="empty-value-in-set"),
        pytest.param("app in ()", {"app": ""}, True, id="empty-set-is-empty-value"),
        pytest.param("version>2", LABELS, True, id="gt"),
        pytest.param("version<3", LABELS, False, id="lt"),
        pytest.param("app>2", LABELS, False, id="gt-non-integer-label"),
        pytest.param("in=notin", {"in": "notin"}, True, id="keywords-as-key-and-value"),
        pytest.param("app in (in,notin)", {"app": "in"}, True, id="keywords-as-values"),
    ],
)
def test_label_selector_matches(selector: str, labels: dict[str, str] | None, expected: bool) -> None:
    assert parse_label_selector(selector).matches(labels) is expected


@pytest.mark.parametrize(
    ("selector", "rendered"),
    [
        pytest.param("b=1,a=2", "a=2,b=1", id="sorted-by-key"),
        pytest.param(
            "x in (foo,,baz),y,z notin ()", "x in (,baz,foo),y,z notin ()", id="apimachinery-doc-example"
        ),
        pytest.param("!a,b!=c,d==e,f>1", "!a,b!=c,d==e,f>1", id="operators"),
    ],
)
def test_label_selector_string(selector: str, rendered: str) -> None:
    assert str(parse_label_selector(selector)) == rendered


_NAME_PART = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_VALUE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for "
    "validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        pytest.param(
            "a b",
            "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt",
            id="no-operator",
        ),
        pytest.param(
            "a in b", "unable to parse requirement: found 'b' expected: '('", id="in-without-parens"
        ),
        pytest.param(
            "a in (x y)", "unable to parse requirement: found 'y', expected: ',' or ')'", id="set-no-comma"
        ),
        pytest.param(
            "a in (b,", "unable to parse requirement: found '', expected: ',', or identifier", id="unclosed"
        ),
        pytest.param("a=b=c", "found '=', expected: ',' or 'end of string'", id="two-operators"),
        pytest.param("!a=b", "found '=', expected: ',' or 'end of string'", id="not-exists-with-value"),
        pytest.param("a,", "found '', expected: identifier after ','", id="trailing-comma"),
        pytest.param(",a", "found ',', expected: !, identifier, or 'end of string'", id="leading-comma"),
        pytest.param(
            "a=(b", "unable to parse requirement: found '(', expected: identifier", id="paren-value"
        ),
        pytest.param(
            "-a=1", f'unable to parse requirement: <nil>: Invalid value: "-a": {_NAME_PART}', id="bad-key"
        ),
        pytest.param(
            "a/=1",
            'unable to parse requirement: <nil>: Invalid value: "a/": name part must be non-empty; '
            + _NAME_PART,
            id="empty-name-part",
        ),
        pytest.param(
            "a=b_",
            f'unable to parse requirement: values[0][a]: Invalid value: "b_": {_VALUE}',
            id="bad-value",
        ),
        pytest.param(
            "a in (ok,-bad)",
            f'unable to parse requirement: values[0][a]: Invalid value: "-bad": {_VALUE}',
            id="bad-value-in-set-sorted-index",
        ),
        pytest.param(
            "a<x",
            "unable to parse requirement: values[0]: Invalid value: \"x\": for 'Gt', 'Lt' operators, "
            "the value must be an integer",
            id="lt-not-integer",
        ),
        pytest.param(
            "a=" + "x" * 64,
            f'unable to parse requirement: values[0][a]: Invalid value: "{"x" * 64}": '
            "must be no more than 63 characters",
            id="value-too-long",
        ),
    ],
)
def test_label_selector_errors(selector: str, message: str) -> None:
    with pytest.raises(ApiError) as err:
        parse_label_selector(selector)
    assert (err.value.code, err.value.reason, err.value.message) == (400, "BadRequest", message)


@pytest.mark.parametrize(
    ("sel", "labels", "expected"),
    [
        pytest.param(None, {"a": "1"}, False, id="nil-matches-nothing"),
        pytest.param(None, None, False, id="nil-matches-nothing-even-unlabelled"),
        pytest.param({}, {"a": "1"}, True, id="empty-matches-everything"),
        pytest.param({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True, id="match-labels"),
        pytest.param({"matchLabels": {"a": "1"}}, {"a": "2"}, False, id="match-labels-miss"),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]},
            {"a": "2"},
            True,
            id="In",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]},
            {},
            True,
            id="NotIn-absent",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True, id="Exists"
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]},
            {"a": ""},
            False,
            id="DoesNotExist",
        ),
        pytest.param(
            {"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]},
            {"a": "1"},
            False,
            id="labels-and-expressions",
        ),
    ],
)
def test_label_selector_from_object(
    sel: dict[str, Any] | None, labels: dict[str, str] | None, expected: bool
) -> None:
    assert label_selector_from_object(sel).matches(labels) is expected


@pytest.mark.parametrize(
    ("sel", "message"),
    [
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
            '"Gt" is not a valid label selector operator',
            id="bad-operator",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
            "values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't be empty",
            id="in-without-values",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
            'values: Invalid value: []string{"x"}: values set must be empty for exists and does not exist',
            id="exists-with-values",
        ),
        pytest.param({"matchLabels": {"-a": "1"}}, f'key: Invalid value: "-a": {_NAME_PART}', id="bad-key"),
    ],
)
def test_label_selector_from_object_errors(sel: dict[str, Any], message: str) -> None:
    with pytest.raises(ApiError) as err:
        label_selector_from_object(sel)
    assert (err.value.code, err.value.message) == (400, message)


def test_label_selector_empty_and_nothing() -> None:
    assert parse_label_selector("").empty
    assert not parse_label_selector("a").empty
    assert not LabelSelector(nothing=True).empty


POD = {
    "metadata": {"name": "web-0", "namespace": "team-a"},
    "spec": {
        "nodeName": "gpu-1",
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "serviceAccountName": "default",
    },
    "status": {"phase": "Running", "podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}]},
}
NODE = {"metadata": {"name": "gpu-1"}, "spec": {"unschedulable": True}}
CORE_EVENT = {
    "metadata": {"name": "web-0.1", "namespace": "team-a"},
    "involvedObject": {"kind": "Pod", "name": "web-0", "namespace": "team-a", "uid": "u-1"},
    "reason": "Scheduled",
    "type": "Normal",
    "reportingComponent": "default-scheduler",
    "source": {},
}
NEW_EVENT = {
    "metadata": {"name": "web-0.1", "namespace": "team-a"},
    "regarding": {"kind": "Pod", "name": "web-0", "uid": "u-1"},
    "reason": "Scheduled",
    "type": "Warning",
    "reportingController": "kubelet",
}


@pytest.mark.parametrize(
    ("rt", "selector", "obj", "expected"),
    [
        pytest.param(PODS, "", POD, True, id="empty"),
        pytest.param(PODS, "metadata.name=web-0", POD, True, id="name"),
        pytest.param(PODS, "metadata.name==web-1", POD, False, id="name-double-equals-miss"),
        pytest.param(PODS, "metadata.namespace!=team-b", POD, True, id="namespace-not-equals"),
        pytest.param(PODS, "spec.nodeName=gpu-1,status.phase=Running", POD, True, id="node-and-phase"),
        pytest.param(PODS, "spec.nodeName=", {"metadata": {"name": "p"}}, True, id="unscheduled-pod"),
        pytest.param(PODS, "spec.host=gpu-1", POD, True, id="spec-host-alias"),
        pytest.param(PODS, "status.podIP=10.0.0.5", POD, True, id="pod-ip"),
        pytest.param(PODS, "spec.hostNetwork=false", POD, True, id="host-network-defaults-false"),
        pytest.param(PODS, "spec.serviceAccountName=default,spec.restartPolicy=Always", POD, True, id="sa"),
        pytest.param(PODS, "spec.schedulerName=default-scheduler", POD, True, id="scheduler"),
        pytest.param(PODS, "status.nominatedNodeName=", POD, True, id="nominated-missing-is-empty"),
        pytest.param(NODES, "spec.unschedulable=true", NODE, True, id="node-unschedulable"),
        pytest.param(
            NODES, "spec.unschedulable=false", {"metadata": {"name": "n"}}, True, id="node-bool-default"
        ),
        pytest.param(
            PVS, "metadata.namespace=", {"metadata": {"name": "pv"}}, True, id="cluster-scoped-namespace"
        ),
        pytest.param(
            EVENTS, "involvedObject.kind=Pod,involvedObject.name=web-0", CORE_EVENT, True, id="event"
        ),
        pytest.param(
            EVENTS, "involvedObject.uid=u-1,reason=Scheduled,type=Normal", CORE_EVENT, True, id="event-uid"
        ),
        pytest.param(EVENTS, "source=default-scheduler", CORE_EVENT, True, id="event-source-falls-back"),
        pytest.param(
            EVENTS, "reportingComponent=default-scheduler", CORE_EVENT, True, id="reporting-component"
        ),
        pytest.param(
            NEW_EVENTS, "regarding.kind=Pod,regarding.name=web-0", NEW_EVENT, True, id="events-k8s-io"
        ),
        pytest.param(NEW_EVENTS, "regarding.uid=u-1,type=Warning", NEW_EVENT, True, id="events-k8s-io-type"),
        pytest.param(
            NEW_EVENTS, "reportingController=kubelet", NEW_EVENT, True, id="events-k8s-io-controller"
        ),
        pytest.param(
            SECRETS, "type=kubernetes.io/tls", {"type": "kubernetes.io/tls"}, True, id="secret-type"
        ),
        pytest.param(
            NAMESPACES, "status.phase=Terminating", {"status": {"phase": "Active"}}, False, id="ns-phase"
        ),
        pytest.param(
            SERVICES, "spec.type=ClusterIP", {"spec": {"type": "ClusterIP"}}, True, id="service-type"
        ),
        pytest.param(
            CONFIGMAPS, r"metadata.name=a\,b", {"metadata": {"name": "a,b"}}, True, id="escaped-comma"
        ),
        pytest.param(
            VMS, "metadata.namespace=team-a", {"metadata": {"namespace": "team-a"}}, True, id="custom-ns"
        ),
    ],
)
def test_field_selector_matches(rt: ResourceType, selector: str, obj: dict[str, Any], expected: bool) -> None:
    assert parse_field_selector(selector, rt).matches(obj) is expected


@pytest.mark.parametrize(
    ("rt", "selector", "message"),
    [
        pytest.param(PODS, "spec.containers=x", "field label not supported: spec.containers", id="pod-field"),
        pytest.param(
            NODES, "metadata.namespace=x", "field label not supported: metadata.namespace", id="node-ns"
        ),
        pytest.param(
            NAMESPACES, "metadata.namespace=x", "field label not supported: metadata.namespace", id="ns-ns"
        ),
        pytest.param(
            EVENTS, "regarding.kind=Pod", "field label not supported: regarding.kind", id="core-event"
        ),
        pytest.param(NEW_EVENTS, "source=x", "field label not supported: source", id="new-event"),
        pytest.param(SECRETS, "data=x", "field label not supported: data", id="secret"),
        pytest.param(VMS, "spec.running=true", "field label not supported: spec.running", id="custom"),
        pytest.param(
            NETWORKFENCES,
            "metadata.namespace=x",
            "field label not supported: metadata.namespace",
            id="custom-cluster",
        ),
        pytest.param(
            CONFIGMAPS,
            "data.x=y",
            '"data.x" is not a known field selector: only "metadata.name", "metadata.namespace"',
            id="default-conversion",
        ),
        pytest.param(
            PVS,
            "spec.claimRef=x",
            '"spec.claimRef" is not a known field selector: only "metadata.name", "metadata.namespace"',
            id="pv",
        ),
        pytest.param(PODS, "zzz=1,aaa=2", "field label not supported: aaa", id="terms-sorted-first-error"),
        pytest.param(
            PODS,
            "metadata.name",
            "invalid selector: 'metadata.name'; can't understand 'metadata.name'",
            id="no-operator",
        ),
        pytest.param(
            PODS,
            "metadata.name=a=b",
            "invalid field selector: unescaped character in value: 61",
            id="unescaped-equals",
        ),
        pytest.param(
            PODS,
            r"metadata.name=a\x",
            r"invalid field selector: invalid escape sequence: \x",
            id="bad-escape",
        ),
        pytest.param(
            PODS, "metadata.name = a", "field label not supported: metadata.name ", id="no-trimming"
        ),
    ],
)
def test_field_selector_errors(rt: ResourceType, selector: str, message: str) -> None:
    with pytest.raises(ApiError) as err:
        parse_field_selector(selector, rt)
    assert (err.value.code, err.value.reason, err.value.message) == (400, "BadRequest", message)


def test_field_selector_terms_and_exact_match() -> None:
    sel = parse_field_selector("spec.host=n1,status.phase!=Failed,,", PODS)
    assert [(t.field, t.value, t.negate) for t in sel.terms] == [
        ("spec.nodeName", "n1", False),
        ("status.phase", "Failed", True),
    ]
    assert sel.requires_exact_match("spec.nodeName") == "n1"
    assert sel.requires_exact_match("status.phase") is None
    assert parse_field_selector("", PODS).empty


def test_custom_resource_selectable_fields() -> None:
    sel = parse_field_selector("spec.runStrategy=Always", VMS, extra=["spec.runStrategy"])
    assert sel.matches({"spec": {"runStrategy": "Always"}})
