"""Decision table for the fencing verdict: may a personal RBD disk start on a new node now?"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuworkspace_spawner.lifecycle.fencing import (
    OUT_OF_SERVICE_TAINT,
    claim_consumers,
    decide_fencing,
    evidence_needed,
    refuse_shared_disk,
)

NS = "gpu-workspaces"
PV = "pvc-1234"
CLAIM_NAME = "home-alice"
OOS = {"key": OUT_OF_SERVICE_TAINT, "value": "nodeshutdown", "effect": "NoExecute"}
UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}


def claim(*modes: str) -> dict[str, Any]:
    return {
        "metadata": {"name": CLAIM_NAME, "namespace": NS, "uid": "claim-uid"},
        "spec": {"accessModes": list(modes or ["ReadWriteOnce"]), "volumeName": PV},
        "status": {"phase": "Bound"},
    }


def va(node: str, *, pv: str = PV, attached: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": f"csi-{node}-{pv}"},
        "spec": {"attacher": "rbd.csi.ceph.com", "nodeName": node, "source": {"persistentVolumeName": pv}},
        "status": {"attached": attached},
    }


def pod(
    name: str = "jupyter-alice",
    node: str | None = "gpu-1",
    *,
    uid: str | None = None,
    claim_name: str = CLAIM_NAME,
    phase: str = "Running",
    terminating: bool = False,
    owner: str | None = None,
    namespace: str = NS,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid or f"{name}-uid"}
    if terminating:
        meta["deletionTimestamp"] = "2026-03-01T12:00:00Z"
    if owner:
        meta["ownerReferences"] = [{"kind": "VirtualMachineInstance", "name": "vm", "uid": owner}]
    spec: dict[str, Any] = {
        "containers": [{"name": "notebook"}],
        "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": claim_name}}],
    }
    if node:
        spec["nodeName"] = node
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def vmi(
    name: str = "notebook-alice",
    node: str | None = "gpu-1",
    *,
    uid: str | None = None,
    via: str = "dataVolume",
    phase: str = "Running",
) -> dict[str, Any]:
    volume: dict[str, Any] = (
        {"name": "root", "dataVolume": {"name": CLAIM_NAME}}
        if via == "dataVolume"
        else {"name": "root", "persistentVolumeClaim": {"claimName": CLAIM_NAME}}
    )
    status: dict[str, Any] = {"phase": phase}
    if node:
        status["nodeName"] = node
    return {
        "metadata": {"name": name, "namespace": NS, "uid": uid or f"{name}-uid"},
        "spec": {"domain": {"devices": {}}, "volumes": [volume]},
        "status": status,
    }


def node(
    name: str = "gpu-1",
    *,
    ready: str = "True",
    taints: list[dict[str, Any]] | None = None,
    addresses: tuple[str, ...] = ("10.0.0.11",),
    external: str | None = None,
) -> dict[str, Any]:
    addrs = [{"type": "InternalIP", "address": a} for a in addresses]
    addrs.append({"type": "Hostname", "address": name})
    if external:
        addrs.append({"type": "ExternalIP", "address": external})
    return {
        "metadata": {"name": name},
        "spec": {"taints": taints or []},
        "status": {"conditions": [{"type": "Ready", "status": ready}], "addresses": addrs},
    }


def down(name: str = "gpu-1", *, tainted: bool = True, **kwargs: Any) -> dict[str, Any]:
    return node(name, ready="Unknown", taints=[UNREACHABLE, *([OOS] if tainted else [])], **kwargs)


def fence(
    *cidrs: str,
    name: str = "fence-gpu-1",
    state: str = "Fenced",
    result: str | None = "Succeeded",
    message: str | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if result:
        status["result"] = result
        status["message"] = message or (
            "fencing operation successful" if result == "Succeeded" else "rpc error: blocklist failed"
        )
    return {
        "apiVersion": "csiaddons.openshift.io/v1alpha1",
        "kind": "NetworkFence",
        "metadata": {"name": name, "generation": 1},
        "spec": {"driver": "rbd.csi.ceph.com", "cidrs": list(cidrs or ["10.0.0.11/32"]), "fenceState": state},
        "status": status,
    }


def verdict(
    *,
    attachments: list[dict[str, Any]] | None = None,
    consumers: list[dict[str, Any]] | None = None,
    nodes: dict[str, dict[str, Any] | None] | None = None,
    fences: list[dict[str, Any]] | None = None,
    own: frozenset[str] = frozenset(),
    modes: tuple[str, ...] = (),
) -> Any:
    return decide_fencing(
        claim=claim(*modes),
        pv_name=PV,
        attachments=attachments or [],
        consumers=consumers or [],
        nodes=nodes or {},
        fences=fences or [],
        own_uids=own,
    )


CASES = [
    pytest.param({}, "pass", "the disk is not attached anywhere", id="not-attached"),
    pytest.param(
        {"consumers": [pod(claim_name="home-bob")], "attachments": [va("gpu-1", pv="pvc-other")]},
        "pass",
        "the disk is not attached anywhere",
        id="other-claims-and-volumes-ignored",
    ),
    pytest.param(
        {"consumers": [pod(namespace="other-team")], "nodes": {"gpu-1": node()}},
        "pass",
        "the disk is not attached anywhere",
        id="same-claim-name-other-namespace-ignored",
    ),
    pytest.param(
        {"attachments": [va("gpu-1")], "nodes": {"gpu-1": node()}},
        "pass",
        "node gpu-1 is Ready and nothing there uses the disk",
        id="stale-va-on-ready-node",
    ),
    pytest.param(
        {"attachments": [va("gpu-1", attached=False)], "nodes": {"gpu-1": node()}},
        "pass",
        "node gpu-1 is Ready",
        id="detached-va-on-ready-node",
    ),
    pytest.param(
        {"consumers": [pod()], "attachments": [va("gpu-1")], "nodes": {"gpu-1": node()}},
        "refuse",
        "the disk is in use by pod jupyter-alice on node gpu-1",
        id="live-pod-on-ready-node",
    ),
    pytest.param(
        {"consumers": [pod(terminating=True)], "nodes": {"gpu-1": node()}},
        "refuse",
        "the disk is in use by terminating pod jupyter-alice on node gpu-1",
        id="terminating-pod-on-ready-node",
    ),
    pytest.param(
        {"consumers": [pod(phase="Succeeded")], "nodes": {"gpu-1": node()}},
        "pass",
        "node gpu-1 is Ready and nothing there uses the disk",
        id="finished-pod-on-ready-node",
    ),
    pytest.param(
        {"consumers": [pod(node=None, phase="Pending")]},
        "refuse",
        "the disk is in use by pending pod jupyter-alice (not yet scheduled)",
        id="pending-consumer",
    ),
    pytest.param(
        {"consumers": [vmi(node=None, phase="Scheduling")]},
        "refuse",
        "the disk is in use by pending VMI notebook-alice (not yet scheduled)",
        id="pending-vmi",
    ),
    pytest.param(
        {"consumers": [pod(node=None, uid="mine")], "own": frozenset({"mine"})},
        "pass",
        "the disk is not attached anywhere",
        id="own-pending-consumer-ignored",
    ),
    pytest.param(
        {
            "consumers": [vmi(uid="my-vmi"), pod("virt-launcher-notebook-alice-x", owner="my-vmi")],
            "nodes": {"gpu-1": node()},
            "own": frozenset({"my-vmi"}),
        },
        "pass",
        "the disk is not attached anywhere",
        id="own-vmi-and-its-launcher-ignored",
    ),
    pytest.param(
        {"consumers": [pod()], "nodes": {"gpu-1": down(tainted=False)}, "fences": [fence()]},
        "refuse",
        "node gpu-1 is not Ready (Ready=Unknown) and not proven fenced: it lacks the taint "
        "node.kubernetes.io/out-of-service:NoExecute",
        id="not-ready-without-taint",
    ),
    pytest.param(
        {
            "consumers": [pod()],
            "nodes": {"gpu-1": node(ready="True", taints=[{**OOS, "effect": "NoSchedule"}])},
        },
        "refuse",
        "the disk is in use by pod jupyter-alice on node gpu-1",
        id="ready-node-with-consumer-even-if-tainted",
    ),
    pytest.param(
        {
            "consumers": [pod()],
            "nodes": {"gpu-1": node(ready="False", taints=[{**OOS, "effect": "NoSchedule"}])},
            "fences": [fence()],
        },
        "refuse",
        "it lacks the taint node.kubernetes.io/out-of-service:NoExecute",
        id="taint-with-wrong-effect",
    ),
    pytest.param(
        {"consumers": [pod()], "nodes": {"gpu-1": down()}},
        "refuse",
        "node gpu-1 is not Ready (Ready=Unknown) and not proven fenced: no NetworkFence covers address "
        "10.0.0.11",
        id="taint-without-fence",
    ),
    pytest.param(
        {"attachments": [va("gpu-1")], "nodes": {"gpu-1": down()}},
        "refuse",
        "no NetworkFence covers address 10.0.0.11",
        id="stale-va-on-unreachable-node-needs-fence",
    ),
    pytest.param(
        {"consumers": [pod()], "nodes": {"gpu-1": down()}, "fences": [fence(state="Unfenced")]},
        "refuse",
        "NetworkFence fence-gpu-1 covering 10.0.0.11 has fenceState Unfenced, not Fenced",
        id="fence-unfenced",
    ),
    pytest.param(
        {"consumers": [pod()], "nodes": {"gpu-1": down()}, "fences": [fence(result="Failed")]},
        "refuse",
        "NetworkFence fence-gpu-1 covering 10.0.0.11 has not Succeeded (status.result Failed: rpc error: "
        "blocklist failed)",
        id="fence-failed",
    ),
    pytest.param(
        {"consumers": [pod()], "nodes": {"gpu-1": down()}, "fences": [fence(result=None)]},
        "refuse",
        "has not Succeeded (status.result not set)",
        id="fence-not-reconciled-yet",
    ),
    pytest.param(
        {
            "consumers": [pod()],
            "nodes": {"gpu-1": down()},
            "fences": [fence(message="unfencing operation successful")],
        },
        "refuse",
        "still reports the last unfence",
        id="fence-flipped-back-status-stale",
    ),
    pytest.param(
        {"consumers": [pod()], "nodes": {"gpu-1": down()}, "fences": [fence("10.0.0.11/32")]},
        "pass",
        "the disk may move: node gpu-1 is NotReady, out-of-service and network-fenced",
        id="fence-covering-slash-32",
    ),
    pytest.param(
        {"consumers": [pod()], "nodes": {"gpu-1": down()}, "fences": [fence("10.0.0.0/24")]},
        "pass",
        "network-fenced",
        id="fence-covering-slash-24",
    ),
    pytest.param(
        {"consumers": [pod()], "nodes": {"gpu-1": down()}, "fences": [fence("10.0.1.0/24")]},
        "refuse",
        "no NetworkFence covers address 10.0.0.11",
        id="fence-elsewhere",
    ),
    pytest.param(
        {
            "consumers": [pod()],
            "nodes": {"gpu-1": down(external="192.0.2.7")},
            "fences": [fence("10.0.0.11/32")],
        },
        "refuse",
        "NetworkFence fence-gpu-1 does not cover address 192.0.2.7",
        id="fence-not-covering-second-address",
    ),
    pytest.param(
        {
            "consumers": [pod()],
            "nodes": {"gpu-1": down(external="192.0.2.7")},
            "fences": [fence("10.0.0.11/32"), fence("192.0.2.0/28", name="fence-gpu-1-ext")],
        },
        "pass",
        "network-fenced",
        id="two-fences-cover-both-addresses",
    ),
    pytest.param(
        {
            "consumers": [pod()],
            "nodes": {"gpu-1": down(addresses=("fd00::11",))},
            "fences": [fence("fd00::/64")],
        },
        "pass",
        "network-fenced",
        id="ipv6-fence",
    ),
    pytest.param(
        {"consumers": [pod()], "nodes": {"gpu-1": down(addresses=())}, "fences": [fence()]},
        "refuse",
        "reports no InternalIP or ExternalIP address",
        id="node-without-addresses",
    ),
    pytest.param(
        {"consumers": [pod()], "nodes": {"gpu-1": None}},
        "pass",
        "node gpu-1 no longer exists (removed after power-off)",
        id="node-deleted",
    ),
    pytest.param(
        {"consumers": [pod()], "nodes": {"gpu-2": node("gpu-2")}},
        "pass",
        "node gpu-1 no longer exists",
        id="node-absent-from-the-node-list",
    ),
    pytest.param(
        {
            "attachments": [va("gpu-1"), va("gpu-2")],
            "consumers": [pod(), pod("jupyter-alice-old", "gpu-2", phase="Failed")],
            "nodes": {"gpu-1": down(), "gpu-2": down("gpu-2", addresses=("10.0.0.12",))},
            "fences": [fence()],
        },
        "refuse",
        "node gpu-2 is not Ready (Ready=Unknown) and not proven fenced: no NetworkFence covers address "
        "10.0.0.12",
        id="two-old-nodes-one-fenced-one-not",
    ),
    pytest.param(
        {"consumers": [pod(phase="Failed")], "nodes": {"gpu-1": down()}},
        "refuse",
        "no NetworkFence covers address 10.0.0.11",
        id="finished-consumer-on-unreachable-node-still-needs-fence",
    ),
    pytest.param(
        {"consumers": [vmi()], "nodes": {"gpu-1": node()}},
        "refuse",
        "the disk is in use by VMI notebook-alice on node gpu-1",
        id="vmi-consumer-via-data-volume",
    ),
    pytest.param(
        {"consumers": [vmi(via="pvc")], "nodes": {"gpu-1": down()}, "fences": [fence()]},
        "pass",
        "network-fenced",
        id="vmi-consumer-via-claim-on-fenced-node",
    ),
    pytest.param(
        {"modes": ("ReadWriteMany",)},
        "refuse",
        "claim home-alice asks for ReadWriteMany; a personal home or root disk must be ReadWriteOnce",
        id="rwx-refused",
    ),
    pytest.param(
        {"modes": ("ReadOnlyMany",)},
        "refuse",
        "asks for ReadOnlyMany",
        id="rox-refused",
    ),
]


@pytest.mark.parametrize(("inputs", "action", "reason"), CASES)
def test_decide_fencing(inputs: dict[str, Any], action: str, reason: str) -> None:
    result = verdict(**inputs)
    assert (result.action, reason in result.reason) == (action, True), result.reason
    assert json.loads(json.dumps(result.evidence)) == result.evidence
    if action == "refuse":
        assert result.admin_hint


def test_admin_hint_names_the_commands() -> None:
    result = verdict(consumers=[pod()], nodes={"gpu-1": down(tainted=False, external="192.0.2.7")})
    assert result.action == "refuse"
    assert "`kubectl taint node gpu-1 node.kubernetes.io/out-of-service=nodeshutdown:NoExecute`" in (
        result.admin_hint
    )
    assert "NetworkFence with fenceState: Fenced for cidrs [10.0.0.11/32, 192.0.2.7/32]" in result.admin_hint
    assert "after powering it off, `kubectl delete node gpu-1`" in result.admin_hint


def test_admin_hint_asks_only_for_what_is_missing() -> None:
    result = verdict(consumers=[pod()], nodes={"gpu-1": down(tainted=False)}, fences=[fence()])
    assert "kubectl taint node gpu-1" in result.admin_hint
    assert "NetworkFence" not in result.admin_hint


def test_evidence_shape() -> None:
    result = verdict(
        attachments=[va("gpu-1")],
        consumers=[pod(), pod("other", claim_name="home-bob")],
        nodes={"gpu-1": down()},
        fences=[fence("10.0.0.0/24"), fence("10.9.0.0/16", name="unrelated")],
    )
    assert result.action == "pass"
    assert result.evidence == {
        "claim": CLAIM_NAME,
        "namespace": NS,
        "pv": PV,
        "attachments": [{"name": f"csi-gpu-1-{PV}", "node": "gpu-1", "attached": True, "deleting": False}],
        "consumers": [
            {
                "kind": "Pod",
                "name": "jupyter-alice",
                "namespace": NS,
                "uid": "jupyter-alice-uid",
                "node": "gpu-1",
                "terminating": False,
                "finished": False,
                "own": False,
            }
        ],
        "nodes": {
            "gpu-1": {
                "present": True,
                "ready": "Unknown",
                "taints": [
                    "node.kubernetes.io/unreachable:NoExecute",
                    "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute",
                ],
                "outOfService": True,
                "addresses": ["10.0.0.11"],
                "fences": [
                    {
                        "name": "fence-gpu-1",
                        "fenceState": "Fenced",
                        "result": "Succeeded",
                        "message": "fencing operation successful",
                        "cidrs": ["10.0.0.0/24"],
                    }
                ],
                "ok": True,
                "why": "node gpu-1 is NotReady, out-of-service and network-fenced",
            }
        },
    }


def test_deleted_node_evidence() -> None:
    result = verdict(consumers=[pod()], nodes={"gpu-1": None})
    assert result.evidence["nodes"]["gpu-1"]["present"] is False


def test_pv_name_falls_back_to_the_claim() -> None:
    result = decide_fencing(
        claim=claim(),
        pv_name=None,
        attachments=[va("gpu-1")],
        consumers=[],
        nodes={"gpu-1": down()},
        fences=[],
    )
    assert result.action == "refuse" and result.evidence["pv"] == PV


def test_inputs_not_mutated() -> None:
    consumers, nodes, fences = [pod()], {"gpu-1": down()}, [fence()]
    before = json.dumps([consumers, nodes, fences], sort_keys=True)
    verdict(consumers=consumers, nodes=nodes, fences=fences)
    assert json.dumps([consumers, nodes, fences], sort_keys=True) == before


@pytest.mark.parametrize(
    ("modes", "refused"),
    [
        pytest.param(["ReadWriteOnce"], False, id="rwo"),
        pytest.param(["ReadWriteOncePod"], False, id="rwop"),
        pytest.param(["ReadWriteOnce", "ReadWriteMany"], True, id="rwo-and-rwx"),
        pytest.param(["ReadOnlyMany"], True, id="rox"),
        pytest.param([], False, id="none-given"),
    ],
)
def test_refuse_shared_disk(modes: list[str], refused: bool) -> None:
    message = refuse_shared_disk({"metadata": {"name": "root-alice"}, "spec": {"accessModes": modes}})
    assert (message is not None) == refused
    if message:
        assert "root-alice" in message


def test_claim_consumers_sorted_and_kinds() -> None:
    found = claim_consumers(claim(), [vmi(), pod("b"), pod("a"), pod("z", claim_name="home-bob")])
    assert [(c.kind, c.name) for c in found] == [
        ("Pod", "a"),
        ("Pod", "b"),
        ("VirtualMachineInstance", "notebook-alice"),
    ]


# -- property: an unreachable node with a consumer passes only with taint + fence + coverage ------

ADDRESSES = ["10.0.0.11", "10.0.0.12", "192.0.2.7", "fd00::11"]
CIDRS = ["10.0.0.11/32", "10.0.0.0/24", "10.0.0.12/32", "192.0.2.0/28", "fd00::/64", "0.0.0.0/0", "bogus"]


@st.composite
def scenario(draw: st.DrawFn) -> dict[str, Any]:
    addresses = draw(st.lists(st.sampled_from(ADDRESSES), min_size=0, max_size=3, unique=True))
    taints = draw(
        st.lists(
            st.fixed_dictionaries(
                {
                    "key": st.sampled_from([OUT_OF_SERVICE_TAINT, "node.kubernetes.io/unreachable"]),
                    "value": st.sampled_from(["nodeshutdown", ""]),
                    "effect": st.sampled_from(["NoExecute", "NoSchedule"]),
                }
            ),
            max_size=3,
        )
    )
    fences = draw(
        st.lists(
            st.builds(
                lambda cidrs, state, result, i: fence(*cidrs, name=f"f{i}", state=state, result=result),
                st.lists(st.sampled_from(CIDRS), min_size=1, max_size=3),
                st.sampled_from(["Fenced", "Unfenced"]),
                st.sampled_from(["Succeeded", "Failed", None]),
                st.integers(0, 1000),
            ),
            max_size=3,
        )
    )
    ready = draw(st.sampled_from(["False", "Unknown", "missing"]))
    consumer = draw(st.sampled_from(["pod", "terminating", "finished", "vmi"]))
    return {
        "addresses": addresses,
        "taints": taints,
        "fences": fences,
        "ready": ready,
        "consumer": consumer,
    }


def _proven(case: dict[str, Any]) -> bool:
    import ipaddress

    tainted = any(t["key"] == OUT_OF_SERVICE_TAINT and t["effect"] == "NoExecute" for t in case["taints"])

    def covered(address: str) -> bool:
        for f in case["fences"]:
            if f["spec"]["fenceState"] != "Fenced" or f["status"].get("result") != "Succeeded":
                continue
            for cidr in f["spec"]["cidrs"]:
                try:
                    if ipaddress.ip_address(address) in ipaddress.ip_network(cidr, strict=False):
                        return True
                except ValueError:
                    continue
        return False

    return tainted and bool(case["addresses"]) and all(covered(a) for a in case["addresses"])


@settings(max_examples=300, deadline=None)
@given(scenario())
def test_unreachable_node_never_passes_without_proof(case: dict[str, Any]) -> None:
    the_node = node(ready=case["ready"], taints=case["taints"], addresses=tuple(case["addresses"]))
    if case["ready"] == "missing":
        the_node["status"]["conditions"] = []
    consumer = {
        "pod": pod(),
        "terminating": pod(terminating=True),
        "finished": pod(phase="Failed"),
        "vmi": vmi(),
    }[case["consumer"]]
    result = verdict(consumers=[consumer], nodes={"gpu-1": the_node}, fences=case["fences"])
    assert (result.action == "pass") == _proven(case), result.reason


@pytest.mark.parametrize(
    ("nodes", "action"),
    [
        pytest.param({"gpu-1": down(tainted=False)}, "refuse", id="last-node-unreachable-no-va-refused"),
        pytest.param({"gpu-1": node()}, "pass", id="last-node-ready-pass"),
        pytest.param({}, "pass", id="last-node-deleted-pass"),
    ],
)
def test_last_node_counts_without_any_volume_attachment(
    nodes: dict[str, dict[str, Any] | None], action: str
) -> None:
    """The attach/detach controller force-detaches after 6 min on a dead node: no VA proves nothing."""
    result = decide_fencing(
        claim=claim(), pv_name=PV, attachments=[], consumers=[], nodes=nodes, fences=[], last_node="gpu-1"
    )
    assert result.action == action, result.reason
    assert result.evidence["lastNode"] == "gpu-1"


@pytest.mark.parametrize(
    ("pv", "attachments", "nodes", "needed"),
    [
        pytest.param(None, [va("gpu-1")], [node()], False, id="no-volume-yet"),
        pytest.param(PV, [], [node(), node("gpu-2")], False, id="attached-nowhere-all-ready"),
        pytest.param(PV, [va("gpu-1")], [node()], True, id="attached"),
        pytest.param(PV, [va("gpu-1", pv="pvc-other")], [node()], False, id="other-volume-attached"),
        pytest.param(PV, [], [node(), down("gpu-2")], True, id="a-node-unreachable"),
    ],
)
def test_evidence_needed(pv: str | None, attachments: list[Any], nodes: list[Any], needed: bool) -> None:
    assert evidence_needed(pv, attachments, nodes) is needed
