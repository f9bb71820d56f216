"""The endpoints controller and the EndpointSlice controller of kube-controller-manager.

For every Service with a selector (and not ``ExternalName``), from the Pods that match it:

- :class:`EndpointsController` keeps the ``Endpoints`` of the same name (``pkg/controller/endpoint``):
  ready pods under ``addresses``, not-ready ones under ``notReadyAddresses`` (all under ``addresses`` with
  ``publishNotReadyAddresses``), terminating pods left out, subsets repacked by port set; the Service's
  labels plus ``endpoints.kubernetes.io/managed-by: endpoint-controller``; no ownerReferences; the
  Endpoints is deleted with its Service.
- :class:`EndpointSliceController` keeps ``EndpointSlice`` objects (``pkg/controller/endpointslice``),
  ``generateName: <service>-``, owned by the Service (the garbage collector removes them with it),
  labels ``kubernetes.io/service-name`` and ``endpointslice.kubernetes.io/managed-by:
  endpointslice-controller.k8s.io``; one endpoint per pod with ``conditions`` ready/serving/terminating
  (terminating pods stay, not ready), ``targetRef``, ``nodeName`` and the node's zone; one slice per
  distinct port set, at most 100 endpoints each; a Service without endpoints keeps one placeholder slice
  (no endpoints, no ports; written as ``endpoints: []``, which a v1.33 API server would read back as
  ``null``, since the emulator's validation requires the field).

Ports carry the Service port's name and protocol with the targetPort resolved against the pod: a named
targetPort is looked up in the pod's container ports (same protocol); a pod without it is left out for
that port. Pods without a pod IP or in a terminal phase are left out.

Services without a selector are left alone (their endpoints are somebody else's, as
``resourcemetrics.py``'s exporter Service's are).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..store import Obj, TypeKey
from ..verbs import now_rfc3339
from .base import Key, SimController, rt_of
from .context import SimContext

SERVICES, PODS, NODES = rt_of("", "services"), rt_of("", "pods"), rt_of("", "nodes")
ENDPOINTS, SLICES = rt_of("", "endpoints"), rt_of("discovery.k8s.io", "endpointslices")
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
SLICE_MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
SLICE_CONTROLLER = "endpointslice-controller.k8s.io"
ENDPOINTS_MANAGED_BY_LABEL = "endpoints.kubernetes.io/managed-by"
ENDPOINTS_CONTROLLER = "endpoint-controller"
HEADLESS_LABEL = "service.kubernetes.io/headless"
TRIGGER_TIME = "endpoints.kubernetes.io/last-change-trigger-time"
ZONE_LABEL = "topology.kubernetes.io/zone"
MAX_ENDPOINTS_PER_SLICE = 100  # kube-controller-manager's --max-endpoints-per-slice default

Port = tuple[str, int, str, str | None]  # (name, resolved port, protocol, appProtocol)


# ----------------------------------------------------------------------------- pure parts
def selects(service: Obj, pod: Obj) -> bool:
    """Whether ``service`` has a selector and it matches ``pod``'s labels (same namespace)."""
    spec = service.get("spec") or {}
    selector = spec.get("selector")
    if not selector or spec.get("type") == "ExternalName":
        return False
    if service["metadata"].get("namespace", "") != pod["metadata"].get("namespace", ""):
        return False
    labels = pod["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def pod_ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def pod_ip(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("podIP") or "")


def _terminal(pod: Obj) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    policy = (pod.get("spec") or {}).get("restartPolicy", "Always")
    return (phase == "Failed" and policy == "Never") or (phase == "Succeeded" and policy != "Always")


def find_port(pod: Obj, service_port: Obj) -> int | None:
    """``podutil.FindPort``: the container port a Service port's targetPort means on ``pod``."""
    target = service_port.get("targetPort", service_port.get("port"))
    protocol = service_port.get("protocol", "TCP")
    if isinstance(target, int):
        return target
    if isinstance(target, str) and target.isdigit():
        return int(target)
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == target and port.get("protocol", "TCP") == protocol:
                return int(port["containerPort"])
    return None


def pod_ports(service: Obj, pod: Obj) -> tuple[Port, ...]:
    """The Service's ports as ``pod`` serves them, in the Service's order (unresolvable ones left out)."""
    out: list[Port] = []
    for sp in (service.get("spec") or {}).get("ports") or []:
        number = find_port(pod, sp)
        if number is not None:
            out.append((sp.get("name") or "", number, sp.get("protocol", "TCP"), sp.get("appProtocol")))
    return tuple(out)


def _port_obj(port: Port, *, slice_form: bool) -> Obj:
    name, number, protocol, app_protocol = port
    obj: Obj = {"name": name} if name or slice_form else {}
    obj.update(port=number, protocol=protocol)
    if app_protocol:
        obj["appProtocol"] = app_protocol
    return obj


def _target_ref(pod: Obj) -> Obj:
    meta = pod["metadata"]
    return {"kind": "Pod", "namespace": meta.get("namespace", ""), "name": meta["name"], "uid": meta["uid"]}


def _hostname(service: Obj, pod: Obj) -> str:
    spec = pod.get("spec") or {}
    if spec.get("hostname") and spec.get("subdomain") == service["metadata"]["name"]:
        return str(spec["hostname"])
    return ""


def endpoint_subsets(service: Obj, pods: Iterable[Obj]) -> list[Obj]:
    """``Endpoints.subsets`` for ``service`` (``endpoints_controller.syncService`` + ``RepackSubsets``)."""
    publish = bool((service.get("spec") or {}).get("publishNotReadyAddresses"))
    # port set -> (ready addresses, not-ready addresses)
    groups: dict[tuple[Port, ...], tuple[list[Obj], list[Obj]]] = {}
    for pod in pods:
        ip = pod_ip(pod)
        if not ip or _terminal(pod) or (pod["metadata"].get("deletionTimestamp") and not publish):
            continue
        address: Obj = {"ip": ip}
        if _hostname(service, pod):
            address["hostname"] = _hostname(service, pod)
        if (pod.get("spec") or {}).get("nodeName"):
            address["nodeName"] = pod["spec"]["nodeName"]
        address["targetRef"] = _target_ref(pod)
        ports = pod_ports(service, pod)
        if not ports and (service.get("spec") or {}).get("ports"):
            continue
        ready, not_ready = groups.setdefault(ports, ([], []))
        (ready if publish or pod_ready(pod) else not_ready).append(address)
    subsets = []
    for ports, (ready, not_ready) in sorted(groups.items()):
        subset: Obj = {}
        if ready:
            subset["addresses"] = sorted(ready, key=lambda a: (a["ip"], a["targetRef"]["uid"]))
        if not_ready:
            subset["notReadyAddresses"] = sorted(not_ready, key=lambda a: (a["ip"], a["targetRef"]["uid"]))
        if ports:
            subset["ports"] = [_port_obj(p, slice_form=False) for p in ports]
        subsets.append(subset)
    return subsets


def slice_groups(
    service: Obj, pods: Iterable[Obj], zones: dict[str, str]
) -> dict[tuple[Port, ...], list[Obj]]:
    """EndpointSlice endpoints for ``service`` grouped by port set; ``zones`` maps node → zone."""
    publish = bool((service.get("spec") or {}).get("publishNotReadyAddresses"))
    groups: dict[tuple[Port, ...], list[Obj]] = {}
    for pod in pods:
        ip = pod_ip(pod)
        if not ip or _terminal(pod):
            continue
        ports = pod_ports(service, pod)
        if not ports and (service.get("spec") or {}).get("ports"):
            continue
        terminating = bool(pod["metadata"].get("deletionTimestamp"))
        serving = publish or pod_ready(pod)
        endpoint: Obj = {
            "addresses": [ip],
            "conditions": {
                "ready": serving and not terminating,
                "serving": serving,
                "terminating": terminating,
            },
        }
        if _hostname(service, pod):
            endpoint["hostname"] = _hostname(service, pod)
        endpoint["targetRef"] = _target_ref(pod)
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            endpoint["nodeName"] = node
            if zones.get(node):
                endpoint["zone"] = zones[node]
        groups.setdefault(ports, []).append(endpoint)
    for endpoints in groups.values():
        endpoints.sort(key=lambda e: (e["addresses"][0], e["targetRef"]["uid"]))
    return groups


@dataclass(frozen=True)
class SliceBody:
    ports: list[Obj] | None  # None: the placeholder's (no ports)
    endpoints: list[Obj]

    def fields(self) -> Obj:
        out: Obj = {"addressType": "IPv4", "endpoints": self.endpoints}
        if self.ports is not None:
            out["ports"] = self.ports
        return out


def desired_slices(service: Obj, pods: Iterable[Obj], zones: dict[str, str]) -> list[SliceBody]:
    out = []
    for ports, endpoints in sorted(slice_groups(service, pods, zones).items()):
        port_objs = [_port_obj(p, slice_form=True) for p in ports]
        for start in range(0, len(endpoints), MAX_ENDPOINTS_PER_SLICE):
            out.append(SliceBody(port_objs, endpoints[start : start + MAX_ENDPOINTS_PER_SLICE]))
    return out or [SliceBody(None, [])]


def _service_labels(service: Obj) -> dict[str, str]:
    labels = dict(service["metadata"].get("labels") or {})
    if (service.get("spec") or {}).get("clusterIP") == "None":
        labels[HEADLESS_LABEL] = ""
    return labels


# ----------------------------------------------------------------------------- controllers
class _ServiceEndpointsController(SimController):
    """What both controllers share: Services and the Pods they select, to Service keys."""

    own: TypeKey = ENDPOINTS.key

    def __init__(self, ctx: SimContext) -> None:
        super().__init__(ctx.verbs)
        self.ctx = ctx
        self.watches = (SERVICES.key, PODS.key, self.own)

    def keys_for(self, key: TypeKey, obj: Obj, old: Obj | None) -> Iterable[Key]:
        meta = obj["metadata"]
        ns = meta.get("namespace", "")
        if key == SERVICES.key:
            return [(SERVICES.key, ns, meta["name"])]
        if key == PODS.key:
            return [
                (SERVICES.key, ns, svc["metadata"]["name"])
                for svc in self.store.items(SERVICES, ns)
                if selects(svc, obj) or (old is not None and selects(svc, old))
            ]
        return self.own_keys(obj)

    def own_keys(self, obj: Obj) -> Iterable[Key]:
        raise NotImplementedError

    def selected_pods(self, service: Obj) -> Iterator[Obj]:
        ns = service["metadata"].get("namespace", "")
        return (p for p in self.store.items(PODS, ns) if selects(service, p))

    @staticmethod
    def wants_endpoints(service: Obj | None) -> bool:
        if service is None or service["metadata"].get("deletionTimestamp"):
            return False
        spec = service.get("spec") or {}
        return bool(spec.get("selector")) and spec.get("type") != "ExternalName"


class EndpointsController(_ServiceEndpointsController):
    name = "endpoints-controller"
    own = ENDPOINTS.key

    def own_keys(self, obj: Obj) -> Iterable[Key]:
        meta = obj["metadata"]
        if (meta.get("labels") or {}).get(ENDPOINTS_MANAGED_BY_LABEL) != ENDPOINTS_CONTROLLER:
            return []
        return [(SERVICES.key, meta.get("namespace", ""), meta["name"])]

    async def reconcile(self, target: Key) -> None:
        _, ns, name = target
        service = self.get(target)
        current = self.store.get(ENDPOINTS, ns, name)
        if service is None:
            if current is not None:  # the controller deletes a deleted Service's Endpoints
                self.verbs.delete(ENDPOINTS, ns, name, {})
            return
        if not self.wants_endpoints(service):
            return
        subsets = endpoint_subsets(service, self.selected_pods(service))
        labels = {**_service_labels(service), ENDPOINTS_MANAGED_BY_LABEL: ENDPOINTS_CONTROLLER}
        if current is None:
            body: Obj = {
                "apiVersion": "v1",
                "kind": "Endpoints",
                "metadata": {
                    "name": name,
                    "namespace": ns,
                    "labels": labels,
                    "annotations": {TRIGGER_TIME: now_rfc3339()},
                },
            }
            if subsets:
                body["subsets"] = subsets
            self.verbs.create(ENDPOINTS, ns, body)
            return
        meta = current["metadata"]
        if (current.get("subsets") or []) == subsets and (meta.get("labels") or {}) == labels:
            return
        annotations = {**(meta.get("annotations") or {}), TRIGGER_TIME: now_rfc3339()}
        updated = {k: v for k, v in current.items() if k != "subsets"}
        updated["metadata"] = {**meta, "labels": labels, "annotations": annotations}
        if subsets:
            updated["subsets"] = subsets
        self.verbs.update(ENDPOINTS, ns, name, updated)


class EndpointSliceController(_ServiceEndpointsController):
    name = "endpointslice-controller"
    own = SLICES.key

    def own_keys(self, obj: Obj) -> Iterable[Key]:
        meta = obj["metadata"]
        labels = meta.get("labels") or {}
        if labels.get(SLICE_MANAGED_BY_LABEL) != SLICE_CONTROLLER or not labels.get(SERVICE_NAME_LABEL):
            return []
        return [(SERVICES.key, meta.get("namespace", ""), labels[SERVICE_NAME_LABEL])]

    def _zones(self) -> dict[str, str]:
        return {
            n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(ZONE_LABEL, "")
            for n in self.store.items(NODES)
        }

    def managed_slices(self, ns: str, service_name: str) -> list[Obj]:
        return sorted(
            (
                s
                for s in self.store.items(SLICES, ns)
                if (s["metadata"].get("labels") or {}).get(SERVICE_NAME_LABEL) == service_name
                and (s["metadata"].get("labels") or {}).get(SLICE_MANAGED_BY_LABEL) == SLICE_CONTROLLER
            ),
            key=lambda s: s["metadata"]["name"],
        )

    async def reconcile(self, target: Key) -> None:
        _, ns, name = target
        service = self.get(target)
        if not self.wants_endpoints(service):
            return  # a deleted Service's slices go with it (ownerReferences); selector-less ones are not ours
        assert service is not None
        labels = {
            **_service_labels(service),
            SERVICE_NAME_LABEL: name,
            SLICE_MANAGED_BY_LABEL: SLICE_CONTROLLER,
        }
        owner = {
            "apiVersion": "v1",
            "kind": "Service",
            "name": name,
            "uid": service["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        existing = self.managed_slices(ns, name)
        wanted = desired_slices(service, self.selected_pods(service), self._zones())
        # keep slices whose ports already match, then reuse the rest in name order
        unmatched = list(wanted)
        pairs: list[tuple[Obj | None, SliceBody]] = []
        leftovers = []
        for existing_slice in existing:
            match = next((w for w in unmatched if w.ports == existing_slice.get("ports")), None)
            if match is None:
                leftovers.append(existing_slice)
            else:
                unmatched.remove(match)
                pairs.append((existing_slice, match))
        pairs += list(itertools.zip_longest(leftovers[: len(unmatched)], unmatched))
        for current, body in pairs:
            if body is None:
                continue
            self._apply(ns, name, current, body, labels, owner)
        for extra in leftovers[len(unmatched) :]:
            self.verbs.delete(SLICES, ns, extra["metadata"]["name"], {})

    def _apply(
        self, ns: str, name: str, current: Obj | None, body: SliceBody, labels: dict[str, str], owner: Obj
    ) -> None:
        fields = body.fields()
        if current is None:
            meta: Obj = {
                "generateName": f"{name}-",
                "namespace": ns,
                "labels": labels,
                "annotations": {TRIGGER_TIME: now_rfc3339()},
                "ownerReferences": [owner],
            }
            self.verbs.create(
                SLICES,
                ns,
                {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": meta, **fields},
            )
            return
        meta = current["metadata"]
        same = (
            all(current.get(k) == v for k, v in fields.items())
            and ("ports" in current) == ("ports" in fields)
            and (meta.get("labels") or {}) == labels
            and meta.get("ownerReferences") == [owner]
        )
        if same:
            return
        annotations = {**(meta.get("annotations") or {}), TRIGGER_TIME: now_rfc3339()}
        updated: dict[str, Any] = {k: v for k, v in current.items() if k not in ("ports", "endpoints")}
        updated["metadata"] = {
            **meta,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner],
        }
        updated.update(fields)
        self.verbs.update(SLICES, ns, current["metadata"]["name"], updated)
