"""Server-side printing: the ``meta.k8s.io/v1`` ``Table`` that ``kubectl get`` asks for.

Columns and cells follow kubernetes ``pkg/printers/internalversion/printers.go`` (always generated
"wide": priority-1 cells are present and kubectl hides them without ``-o wide``), the default table
convertor (Name, Created At) for kinds without a printer (roles, CRDs), and the apiextensions table
convertor for custom kinds (``additionalPrinterColumns``; ``type: date`` cells are ages rendered by
the server). Column names are title case on the wire; kubectl upper-cases them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from . import jobspec
from .errors import ApiError, bad_request
from .jsonpath import eval_jsonpath, is_num, parse_jsonpath
from .resources import ResourceType

Obj = dict[str, Any]
RowFn = Callable[[Obj, datetime], list[Any]]
TABLE_VERSIONS = ("v1", "v1beta1")


def table_version(accept: str | None) -> str | None:
    """``"v1"``/``"v1beta1"`` when the Accept header asks for a meta.k8s.io Table, else None."""
    for media in (accept or "").split(","):
        params = dict(p.strip().split("=", 1) for p in media.split(";")[1:] if "=" in p)
        if (
            params.get("as") == "Table"
            and params.get("g") == "meta.k8s.io"
            and params.get("v") in TABLE_VERSIONS
        ):
            return params["v"]
    return None


def _pair(big: int, big_unit: str, small: int, small_unit: str) -> str:
    return f"{big}{big_unit}{small}{small_unit}" if small else f"{big}{big_unit}"


_MIN, _HOUR, _DAY, _YEAR = 60, 3600, 86400, 365 * 86400
# HumanDuration's ranges: (exclusive upper bound in seconds, rendering of whole seconds)
_DURATION_STEPS: tuple[tuple[int, Callable[[int], str]], ...] = (
    (2 * _MIN, lambda s: f"{s}s"),
    (10 * _MIN, lambda s: _pair(s // _MIN, "m", s % _MIN, "s")),
    (3 * _HOUR, lambda s: f"{s // _MIN}m"),
    (8 * _HOUR, lambda s: _pair(s // _HOUR, "h", s // _MIN % 60, "m")),
    (48 * _HOUR, lambda s: f"{s // _HOUR}h"),
    (8 * _DAY, lambda s: _pair(s // _DAY, "d", s // _HOUR % 24, "h")),
    (2 * _YEAR, lambda s: f"{s // _DAY}d"),
    (8 * _YEAR, lambda s: _pair(s // _DAY // 365, "y", s // _DAY % 365, "d")),
)


def human_duration(seconds: float) -> str:
    """``k8s.io/apimachinery/pkg/util/duration.HumanDuration``: "5s", "3m2s", "10m", "2d3h", "40d"."""
    if int(seconds) < -1:
        return "<invalid>"  # more than 1s in the future: clock skew is tolerated up to that
    whole = max(int(seconds), 0)
    render = next((fn for bound, fn in _DURATION_STEPS if whole < bound), None)
    return render(whole) if render else f"{whole // _DAY // 365}y"


_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\d)[Tt](\d\d:\d\d:\d\d)(\.\d+)?([Zz]|[+-]\d\d:\d\d)")


def parse_time(value: Any) -> datetime | None:
    """An RFC3339 timestamp (``metav1.Time``/``MicroTime``) as an aware datetime, else None."""
    m = _RFC3339.fullmatch(value) if isinstance(value, str) else None
    if not m:
        return None
    zone = "+00:00" if m.group(4) in ("Z", "z") else m.group(4)
    return datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}{(m.group(3) or '')[:7]}{zone}")


def _ago(when: datetime | None, now: datetime) -> str:
    if when is None:
        return "<unknown>"
    return human_duration((now if now.tzinfo else now.replace(tzinfo=UTC)).timestamp() - when.timestamp())


def _since(value: Any, now: datetime) -> str:
    return _ago(parse_time(value), now)


_BIN = {"": 0, "Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QTY = re.compile(r"([+-]?)(\d+\.?\d*|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?")
_KI, _KILO, _MAX_SI_EXP = 1024, 1000, 18


def format_quantity(text: Any) -> str:
    """``resource.Quantity.String()``: the canonical form (``1024Mi`` -> ``1Gi``, ``1000`` -> ``1k``)."""
    m = _QTY.fullmatch(str(text).strip()) if text not in (None, "") else None
    if not m:
        return "0" if text in (None, "") else str(text)
    sign, digits, suffix = m.group(1), m.group(2), m.group(3) or ""
    value = Fraction(digits.rstrip(".") or "0")
    exponent = suffix[1:] if suffix[:1] in ("e", "E") else None
    if suffix in _BIN:
        value *= _KI ** _BIN[suffix]
    else:
        value *= Fraction(10) ** (int(exponent) if exponent is not None else _SI[suffix])
    value = -value if sign == "-" else value
    if value == 0:
        return "0"
    if suffix in _BIN and suffix and abs(value) >= _KI and value.denominator == 1:
        n, power = value.numerator, 0
        while n % _KI == 0 and power < max(_BIN.values()):
            n, power = n // _KI, power + 1
        return f"{n}{next(k for k, v in _BIN.items() if v == power)}"
    mant, exp = math.ceil(value * 10**9), -9  # sub-nano precision rounds up, like Go
    while mant % _KILO == 0 and exp < _MAX_SI_EXP:
        mant, exp = mant // _KILO, exp + 3
    if exponent is not None:
        return f"{mant}e{exp}" if exp else str(mant)
    return f"{mant}{next(k for k, v in _SI.items() if v == exp)}"


def _go_text(value: Any) -> str | None:
    """How kubectl's JSONPath prints one value: compact JSON for objects/lists, else ``fmt.Print``."""
    if isinstance(value, dict | list):
        text = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
        return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e21 else repr(value)  # noqa: PLR2004
    return None if value is None else str(value)


def _custom_cell(col_type: str, value: Any, now: datetime) -> Any:
    """apiextensions ``cellForJSONValue``; ``string`` columns print like kubectl JSONPath."""
    if col_type == "string":
        return _go_text(value)
    if col_type in ("integer", "number") and is_num(value):
        return int(value) if col_type == "integer" else float(value)
    if col_type == "boolean" and isinstance(value, bool):
        return value
    if col_type == "date" and isinstance(value, str):
        return _since(value, now) if parse_time(value) else "<invalid>"
    return None


_NAME_DESC = (
    "Name must be unique within a namespace. Is required when creating resources, although some resources "
    "may allow a client to request the generation of an appropriate name automatically. Name is primarily "
    "intended for creation idempotence and configuration definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
_CREATED_DESC = (
    "CreationTimestamp is a timestamp representing the server time when this object was created. It is not "
    "guaranteed to be set in happens-before order across separate operations. Clients may not set this "
    "value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for "
    "lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/"
    "api-conventions.md#metadata"
)
_DESC = {
    "Name": _NAME_DESC,
    "Age": _CREATED_DESC,
    "Created At": _CREATED_DESC,
    "Ready": "The aggregate readiness state of this pod for accepting traffic.",
    "Restarts": "The number of times the containers in this pod have been restarted and when the last "
    "container in this pod has restarted.",
}


def _column(name: str, type_: str = "string", fmt: str = "", desc: str = "", priority: int = 0) -> Obj:
    return {"name": name, "type": type_, "format": fmt, "description": desc, "priority": priority}


def _cols(kind: str, spec: str) -> list[Obj]:
    """Columns from ``"Name|Ready|+IP|Attached:boolean"``: ``+`` marks priority 1 (``-o wide``)."""
    out = []
    for item in spec.split("|"):
        name, type_, fmt = [*item.lstrip("+").split(":"), "", ""][:3]
        fmt = fmt or ("name" if name == "Name" else "")
        desc = _DESC.get(name, f"{name} of the {kind}.")
        out.append(_column(name, type_ or "string", fmt, desc, int(item.startswith("+"))))
    return out


def _custom_printer(columns: list[Obj] | None) -> tuple[list[Obj], RowFn]:
    if not columns:  # apiextensions serves a default Age column
        columns = [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]
    heads, paths = _cols("resource", "Name"), []
    for c in columns:
        try:
            paths.append(parse_jsonpath(str(c.get("jsonPath", ""))))
        except ValueError as exc:
            raise ApiError(
                500, "InternalError", "the server could not properly serve the CR columns"
            ) from exc
        desc = (
            c.get("description") or f"Custom resource definition column (in JSONPath format): {c['jsonPath']}"
        )
        fmt, priority = c.get("format", ""), int(c.get("priority", 0))
        heads.append(_column(c["name"], c.get("type", "string"), fmt, desc, priority))

    def row(obj: Obj, now: datetime) -> list[Any]:
        cells: list[Any] = [_meta(obj).get("name", "")]
        for head, steps in zip(heads[1:], paths, strict=True):
            found = eval_jsonpath(steps, obj)
            cells.append(_custom_cell(head["type"], found[0], now) if found else None)
        return cells

    return heads, row


# --- built-in printers: each returns the cells between NAME and AGE, which are added around them ----

CellsFn = Callable[[Obj, datetime], list[Any]]
_PRINTERS: dict[tuple[str, str], tuple[list[Obj], RowFn]] = {}


def _printer(
    kind: str, spec: str, *keys: tuple[str, str], name: Callable[[Obj], str] | None = None
) -> Callable[[CellsFn], CellsFn]:
    """Register a printer; NAME (when first) and AGE (where listed) cells are filled in for it."""
    columns = _cols(kind, spec)
    names = [c["name"] for c in columns]

    def register(cells: CellsFn) -> CellsFn:
        def row(obj: Obj, now: datetime) -> list[Any]:
            out = cells(obj, now)
            if names[0] == "Name":
                out = [name(obj) if name else _meta(obj).get("name", ""), *out]
            if "Age" in names:
                out.insert(names.index("Age"), _since(_meta(obj).get("creationTimestamp"), now))
            return out

        for key in keys:
            _PRINTERS[key] = (columns, row)
        return cells

    return register


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _get(obj: Any, *path: str, default: Any = None) -> Any:
    for key in path:
        if not isinstance(obj, dict) or obj.get(key) is None:
            return default
        obj = obj[key]
    return obj


def _cond_true(conditions: list[Obj], type_: str) -> bool:
    return next((c.get("status") == "True" for c in conditions if c.get("type") == type_), False)


def _later(a: datetime | None, status: Obj) -> datetime | None:
    b = parse_time(_get(status, "lastState", "terminated", "finishedAt"))
    return b if b is not None and (a is None or b > a) else a


def _term_reason(term: Obj, prefix: str) -> str:
    if term.get("reason"):
        return f"{prefix}{term['reason']}"
    if term.get("signal"):
        return f"{prefix}Signal:{term['signal']}"
    return f"{prefix}ExitCode:{term.get('exitCode', 0)}"


class _PodSummary:
    """The ``printPod`` state machine: READY, STATUS (reason) and RESTARTS."""

    def __init__(self, pod: Obj) -> None:
        self.spec, self.status = pod.get("spec") or {}, pod.get("status") or {}
        self.conditions: list[Obj] = self.status.get("conditions") or []
        inits = self.spec.get("initContainers") or []
        self.n_init = len(inits)
        self.sidecars = {c.get("name") for c in inits if c.get("restartPolicy") == "Always"}
        self.total = len(self.spec.get("containers") or []) + len(self.sidecars)
        self.ready = self.restarts = 0
        self.last: datetime | None = None
        self.phase = self.status.get("phase") or "Pending"  # the registry sets Pending on create
        self.reason = self.status.get("reason") or self.phase
        if any(
            c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated" for c in self.conditions
        ):
            self.reason = "SchedulingGated"
        if not self._init_containers() or _cond_true(self.conditions, "Initialized"):
            self._containers()
        if _meta(pod).get("deletionTimestamp"):
            if self.status.get("reason") == "NodeLost":
                self.reason = "Unknown"
            elif self.phase not in ("Succeeded", "Failed"):
                self.reason = "Terminating"

    def _init_containers(self) -> bool:
        """Walk init containers; True while initializing. Restarts so far count sidecars only."""
        sidecar_restarts, last_sidecar, initializing = 0, None, False
        for i, cs in enumerate(self.status.get("initContainerStatuses") or []):
            self.restarts += cs.get("restartCount", 0)
            self.last = _later(self.last, cs)
            sidecar = cs.get("name") in self.sidecars
            if sidecar:
                sidecar_restarts += cs.get("restartCount", 0)
                last_sidecar = _later(last_sidecar, cs)
            term, wait = _get(cs, "state", "terminated"), _get(cs, "state", "waiting")
            if term is not None and term.get("exitCode", 0) == 0:
                continue
            if sidecar and cs.get("started"):
                self.ready += 1 if cs.get("ready") else 0
                continue
            if term is not None:
                self.reason = _term_reason(term, "Init:")
            elif wait is not None and wait.get("reason") and wait["reason"] != "PodInitializing":
                self.reason = "Init:" + wait["reason"]
            else:
                self.reason = f"Init:{i}/{self.n_init}"
            initializing = True
            break
        if not initializing or _cond_true(self.conditions, "Initialized"):
            self.restarts, self.last = sidecar_restarts, last_sidecar
        return initializing

    def _containers(self) -> None:
        running = False
        for cs in reversed(self.status.get("containerStatuses") or []):
            self.restarts += cs.get("restartCount", 0)
            self.last = _later(self.last, cs)
            term, wait = _get(cs, "state", "terminated"), _get(cs, "state", "waiting")
            if wait is not None and wait.get("reason"):
                self.reason = wait["reason"]
            elif term is not None:
                self.reason = _term_reason(term, "")
            elif cs.get("ready") and _get(cs, "state", "running") is not None:
                running, self.ready = True, self.ready + 1
        if self.reason == "Completed" and running:
            self.reason = "Running" if _cond_true(self.conditions, "Ready") else "NotReady"


def pod_status(pod: Obj, now: datetime) -> tuple[str, str, str]:
    """(READY, STATUS, RESTARTS) as kubectl shows them, e.g. ("0/1", "CrashLoopBackOff", "5 (3m ago)")."""
    s = _PodSummary(pod)
    restarts = f"{s.restarts} ({_ago(s.last, now)} ago)" if s.restarts and s.last else str(s.restarts)
    return f"{s.ready}/{s.total}", s.reason, restarts


@_printer("pod", "Name|Ready|Status|Restarts|Age|+IP|+Node|+Nominated Node|+Readiness Gates", ("", "pods"))
def _pod(obj: Obj, now: datetime) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    ip = (status.get("podIPs") or [{}])[0].get("ip") or status.get("podIP") or "<none>"
    gates = [g.get("conditionType") for g in spec.get("readinessGates") or []]
    conds = status.get("conditions") or []
    gates_text = f"{sum(_cond_true(conds, g) for g in gates)}/{len(gates)}" if gates else "<none>"
    node, nominated = spec.get("nodeName") or "<none>", status.get("nominatedNodeName") or "<none>"
    return [*pod_status(obj, now), ip, node, nominated, gates_text]


_NODE_COLS = (
    "Name|Status|Roles|Age|Version|+Internal-IP|+External-IP|+OS-Image|+Kernel-Version|+Container-Runtime"
)
_ROLE_PREFIX = "node-role.kubernetes.io/"


@_printer("node", _NODE_COLS, ("", "nodes"))
def _node(obj: Obj, now: datetime) -> list[Any]:
    status, labels = obj.get("status") or {}, _meta(obj).get("labels") or {}
    ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"][-1:]
    states = ["Ready" if ready[0].get("status") == "True" else "NotReady"] if ready else ["Unknown"]
    states += ["SchedulingDisabled"] if _get(obj, "spec", "unschedulable") else []
    roles = {k.removeprefix(_ROLE_PREFIX) for k in labels if k.startswith(_ROLE_PREFIX) and k != _ROLE_PREFIX}
    roles |= {v for k, v in labels.items() if k == "kubernetes.io/role" and v}
    info, addrs = status.get("nodeInfo") or {}, status.get("addresses") or []
    ips = [
        next((a.get("address") for a in addrs if a.get("type") == t), "<none>")
        for t in ("InternalIP", "ExternalIP")
    ]
    wide = [info.get(k) or "<unknown>" for k in ("osImage", "kernelVersion", "containerRuntimeVersion")]
    return [
        ",".join(states),
        ",".join(sorted(roles)) or "<none>",
        info.get("kubeletVersion", ""),
        *ips,
        *wide,
    ]


_MODES = {"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX", "ReadWriteOncePod": "RWOP"}


def _volume_cells(obj: Obj) -> tuple[str, str, str, str]:
    """Phase (or Terminating), storage class, volume attributes class and volume mode of a PV or PVC."""
    meta, spec = _meta(obj), obj.get("spec") or {}
    phase = (
        "Terminating" if meta.get("deletionTimestamp") else _get(obj, "status", "phase", default="Pending")
    )
    annotated = (meta.get("annotations") or {}).get("volume.beta.kubernetes.io/storage-class")
    storage_class = str(annotated if annotated is not None else spec.get("storageClassName", ""))
    attributes_class = spec.get("volumeAttributesClassName") or "<unset>"
    return phase, storage_class, attributes_class, spec.get("volumeMode", "Filesystem")  # defaulted on create


def _modes(modes: list[str] | None) -> str:
    return ",".join(short for mode, short in _MODES.items() if mode in (modes or []))


_PV_COLS = (
    "Name|Capacity|Access Modes|Reclaim Policy|Status|Claim|StorageClass|VolumeAttributesClass|Reason|Age"
)


@_printer("persistentvolume", _PV_COLS + "|+VolumeMode", ("", "persistentvolumes"))
def _pv(obj: Obj, now: datetime) -> list[Any]:
    spec, claim = obj.get("spec") or {}, _get(obj, "spec", "claimRef")
    phase, storage_class, attributes_class, mode = _volume_cells(obj)
    capacity, modes = format_quantity(_get(spec, "capacity", "storage")), _modes(spec.get("accessModes"))
    policy = spec.get("persistentVolumeReclaimPolicy") or "Retain"  # defaulted on create
    claim_text = f"{claim.get('namespace', '')}/{claim.get('name', '')}" if claim else ""
    cells = [capacity, modes, policy, phase, claim_text]
    return [*cells, storage_class, attributes_class, _get(obj, "status", "reason", default=""), mode]


_PVC_COLS = "Name|Status|Volume|Capacity|Access Modes|StorageClass|VolumeAttributesClass|Age|+VolumeMode"


@_printer("persistentvolumeclaim", _PVC_COLS, ("", "persistentvolumeclaims"))
def _pvc(obj: Obj, now: datetime) -> list[Any]:
    volume, status = _get(obj, "spec", "volumeName", default=""), obj.get("status") or {}
    phase, storage_class, attributes_class, mode = _volume_cells(obj)
    capacity = format_quantity(_get(status, "capacity", "storage")) if volume else ""
    modes = _modes(status.get("accessModes")) if volume else ""
    return [phase, volume, capacity, modes, storage_class, attributes_class, mode]


@_printer("service", "Name|Type|Cluster-IP|External-IP|Port(s)|Age|+Selector", ("", "services"))
def _service(obj: Obj, now: datetime) -> list[Any]:
    spec = obj.get("spec") or {}
    kind, external = spec.get("type", "ClusterIP"), list(spec.get("externalIPs") or [])
    if kind == "LoadBalancer":
        ingress = _get(obj, "status", "loadBalancer", "ingress", default=[])
        lb = sorted({i.get("ip") or i.get("hostname") for i in ingress if i.get("ip") or i.get("hostname")})
        external_ip = ",".join(lb + external) or "<pending>"
    elif kind in ("ClusterIP", "NodePort"):
        external_ip = ",".join(external) or "<none>"
    else:
        external_ip = spec.get("externalName", "") if kind == "ExternalName" else "<unknown>"
    ports = ",".join(
        f"{p.get('port')}{':' + str(p['nodePort']) if p.get('nodePort') else ''}/{p.get('protocol', 'TCP')}"
        for p in spec.get("ports") or []
    )
    cluster_ip = (spec.get("clusterIPs") or [spec.get("clusterIP")])[0] or "<none>"
    selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items())) or "<none>"
    return [kind, cluster_ip, external_ip, ports or "<none>", selector]


def _seconds_between(start: Any, end: Any) -> float | None:
    begin = parse_time(start)
    finish = parse_time(end) if end else datetime.now(UTC)
    return (finish - begin).total_seconds() if begin and finish else None


@_printer("job", "Name|Status|Completions|Duration|Age|+Containers|+Images|+Selector", ("batch", "jobs"))
def _job(obj: Obj, now: datetime) -> list[Any]:
    containers = _get(obj, "spec", "template", "spec", "containers", default=[])
    selector = _get(obj, "spec", "selector", default={})
    match = ",".join(f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items()))
    return [
        *jobspec.job_cells(obj, _seconds_between, human_duration),
        ",".join(c.get("name", "") for c in containers),
        ",".join(c.get("image", "") for c in containers),
        match or "<none>",
    ]


@_printer(
    "cronjob",
    "Name|Schedule|Timezone|Suspend:boolean|Active:integer|Last Schedule|Age|+Containers|+Images|+Selector",
    ("batch", "cronjobs"),
)
def _cronjob(obj: Obj, now: datetime) -> list[Any]:
    spec = obj.get("spec") or {}
    containers = _get(spec, "jobTemplate", "spec", "template", "spec", "containers", default=[])
    selector = _get(spec, "jobTemplate", "spec", "selector", "matchLabels", default={})
    last = _get(obj, "status", "lastScheduleTime")
    return [
        spec.get("schedule", ""),
        spec.get("timeZone") or "<none>",
        str(bool(spec.get("suspend"))),
        len(_get(obj, "status", "active", default=[])),
        _since(last, now) if last else "<none>",
        ",".join(c.get("name", "") for c in containers),
        ",".join(c.get("image", "") for c in containers),
        ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>",
    ]


@_printer(
    "priorityclass",
    "Name|Value:integer|Global-Default:boolean|Age|PreemptionPolicy",
    ("scheduling.k8s.io", "priorityclasses"),
)
def _priorityclass(obj: Obj, now: datetime) -> list[Any]:
    return [obj.get("value", 0), bool(obj.get("globalDefault")), obj.get("preemptionPolicy", "")]


@_printer("resourcequota", "Name|Age|Request|Limit", ("", "resourcequotas"))
def _resourcequota(obj: Obj, now: datetime) -> list[Any]:
    hard, used = _get(obj, "status", "hard", default={}), _get(obj, "status", "used", default={})
    cells: dict[bool, list[str]] = {False: [], True: []}
    for key in sorted(hard):
        cells[key.startswith("limits.")].append(f"{key}: {used.get(key, '0')}/{hard[key]}")
    return [", ".join(cells[False]), ", ".join(cells[True])]


def _more(items: list[str], empty: str = "<unset>", limit: int = 3) -> str:
    text = ",".join(items[:limit])
    return f"{text} + {len(items) - limit} more..." if len(items) > limit else text or empty


@_printer("endpoints", "Name|Endpoints|Age", ("", "endpoints"))
def _endpoints(obj: Obj, now: datetime) -> list[Any]:
    items: list[str] = []
    for ss in obj.get("subsets") or []:
        ips = [str(a.get("ip", "")) for a in ss.get("addresses") or []]
        ports = [p.get("port") for p in ss.get("ports") or []]
        items += [f"[{ip}]:{p}" if ":" in ip else f"{ip}:{p}" for p in ports for ip in ips] if ports else ips
    return [_more(items, empty="") if obj.get("subsets") else "<none>"]


@_printer("endpointslice", "Name|AddressType|Ports|Endpoints|Age", ("discovery.k8s.io", "endpointslices"))
def _endpointslice(obj: Obj, now: datetime) -> list[Any]:
    ports = [
        str(p["port"]) if p.get("port") is not None else p.get("name") or "*" for p in obj.get("ports") or []
    ]
    addresses = [a for e in obj.get("endpoints") or [] for a in e.get("addresses") or []]
    return [obj.get("addressType", ""), _more(ports), _more(addresses)]


_EVENT_COLS = "Last Seen|Type|Reason|Object|+Subobject|+Source|Message|+First Seen|+Count|+Name"


@_printer("event", _EVENT_COLS, ("", "events"), ("events.k8s.io", "events"))
def _event(obj: Obj, now: datetime) -> list[Any]:
    new = "regarding" in obj or "note" in obj or "deprecatedCount" in obj  # events.k8s.io/v1 field names
    ref = obj.get("regarding" if new else "involvedObject") or {}
    first_ts = obj.get("deprecatedFirstTimestamp" if new else "firstTimestamp")
    last_ts = obj.get("deprecatedLastTimestamp" if new else "lastTimestamp")
    source = obj.get("deprecatedSource" if new else "source") or {}
    first = _since(first_ts or obj.get("eventTime"), now)
    last = _since(last_ts, now) if last_ts else first
    count = obj.get("deprecatedCount" if new else "count") or 1  # singleton events have no count
    if obj.get("series"):
        last, count = _since(obj["series"].get("lastObservedTime"), now), obj["series"].get("count", 0)
    kind = str(ref.get("kind", "")).lower()
    target = f"{kind}/{ref['name']}" if ref.get("name") else kind
    component = source.get("component") or obj.get("reportingController", "")
    host = source.get("host") or obj.get("reportingInstance", "")
    message = str(obj.get("note" if new else "message", "")).strip()
    cells = [last, obj.get("type", ""), obj.get("reason", ""), target, ref.get("fieldPath", "")]
    return [
        *cells,
        f"{component}, {host}" if host else component,
        message,
        first,
        count,
        _meta(obj).get("name", ""),
    ]


def _storageclass_name(obj: Obj) -> str:
    notes = _meta(obj).get("annotations") or {}
    default = "true" in (notes.get(f"storageclass{b}.kubernetes.io/is-default-class") for b in ("", ".beta"))
    return str(_meta(obj).get("name", "")) + (" (default)" if default else "")


_SC_COLS = "Name|Provisioner|ReclaimPolicy|VolumeBindingMode|AllowVolumeExpansion|Age"


@_printer("storageclass", _SC_COLS, ("storage.k8s.io", "storageclasses"), name=_storageclass_name)
def _storageclass(obj: Obj, now: datetime) -> list[Any]:
    policy, mode = obj.get("reclaimPolicy", "Delete"), obj.get("volumeBindingMode", "Immediate")
    return [obj.get("provisioner", ""), policy, mode, bool(obj.get("allowVolumeExpansion", False))]


def _subjects(obj: Obj, kind: str) -> str:
    subjects = [s for s in obj.get("subjects") or [] if s.get("kind") == kind]
    if kind == "ServiceAccount":
        return ", ".join(f"{s.get('namespace', '')}/{s.get('name', '')}" for s in subjects)
    return ", ".join(str(s.get("name", "")) for s in subjects)


_RBAC = "rbac.authorization.k8s.io"


@_printer(
    "binding",
    "Name|Role|Age|+Users|+Groups|+ServiceAccounts",
    (_RBAC, "rolebindings"),
    (_RBAC, "clusterrolebindings"),
)
def _binding(obj: Obj, now: datetime) -> list[Any]:
    role = f"{_get(obj, 'roleRef', 'kind', default='')}/{_get(obj, 'roleRef', 'name', default='')}"
    return [role, *(_subjects(obj, kind) for kind in ("User", "Group", "ServiceAccount"))]


_printer("namespace", "Name|Status|Age", ("", "namespaces"))(
    lambda o, _: [_get(o, "status", "phase", default="Active")]  # the registry sets Active on create
)
_printer("secret", "Name|Type|Data|Age", ("", "secrets"))(
    lambda o, _: [o.get("type", "Opaque"), len(o.get("data") or {})]
)
_printer("configmap", "Name|Data|Age", ("", "configmaps"))(
    lambda o, _: [len(o.get("data") or {}) + len(o.get("binaryData") or {})]
)
_printer("serviceaccount", "Name|Secrets|Age", ("", "serviceaccounts"))(
    lambda o, _: [len(o.get("secrets") or [])]
)
_printer("lease", "Name|Holder|Age", ("coordination.k8s.io", "leases"))(
    lambda o, _: [_get(o, "spec", "holderIdentity", default="")]
)


def _volumeattachment(obj: Obj, now: datetime) -> list[Any]:
    spec = obj.get("spec") or {}
    pv = _get(spec, "source", "persistentVolumeName", default="")
    return [spec.get("attacher", ""), pv, spec.get("nodeName", ""), bool(_get(obj, "status", "attached"))]


_printer(
    "volumeattachment",
    "Name|Attacher::name|PV|Node|Attached:boolean|Age",
    ("storage.k8s.io", "volumeattachments"),
)(_volumeattachment)


def _default(obj: Obj, now: datetime) -> list[Any]:
    created = parse_time(_meta(obj).get("creationTimestamp"))
    stamp = created.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if created else "0001-01-01T00:00:00Z"
    return [_meta(obj).get("name", ""), stamp]


_DEFAULT = (_cols("object", "Name|Created At:date"), _default)  # rest.DefaultTableConvertor


def printer_for(rt: ResourceType, extra_columns: list[Obj] | None = None) -> tuple[list[Obj], RowFn]:
    """Column definitions and row function for ``rt`` (custom kinds: the CRD's printer columns)."""
    if rt.custom:
        return _custom_printer(extra_columns)
    return _PRINTERS.get(rt.key, _DEFAULT)


def _row_conditions(rt: ResourceType, obj: Obj) -> list[Obj]:
    phase = _get(obj, "status", "phase")
    if rt.key != ("", "pods") or phase not in ("Succeeded", "Failed"):
        return []
    message = "The pod has completed successfully." if phase == "Succeeded" else "The pod failed."
    return [{"type": "Completed", "status": "True", "reason": phase, "message": message}]


def build_table(
    rt: ResourceType,
    objects: list[Obj],
    *,
    now: datetime,
    include_object: str = "Metadata",
    list_meta: Obj | None = None,
    extra_columns: list[Obj] | None = None,
    version: str = "v1",
) -> Obj:
    """A ``Table`` for a list (pass its ``list_meta``) or a single get (``[obj]``, no ``list_meta``).

    ``include_object`` is the ``includeObject`` parameter: ``Metadata`` (default; each row carries a
    ``PartialObjectMetadata``), ``Object`` (the full object) or ``None`` (no object).
    """
    if include_object not in ("", "None", "Metadata", "Object"):
        raise bad_request(f'unrecognized includeObject value: "{include_object}"')
    if version not in TABLE_VERSIONS:
        raise bad_request(f'unrecognized Table version: "{version}"')
    columns, row_fn = printer_for(rt, extra_columns)
    rows: list[Obj] = []
    for obj in objects:
        row: Obj = {"cells": row_fn(obj, now)}
        if conditions := _row_conditions(rt, obj):
            row["conditions"] = conditions
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            partial = {"kind": "PartialObjectMetadata", "apiVersion": f"meta.k8s.io/{version}"}
            row["object"] = {**partial, "metadata": _meta(obj)}
        rows.append(row)
    metadata: Obj = {}
    if list_meta is not None:
        metadata = {
            k: list_meta[k] for k in ("resourceVersion", "continue", "remainingItemCount") if k in list_meta
        }
    elif len(objects) == 1 and _meta(objects[0]).get("resourceVersion"):
        metadata["resourceVersion"] = _meta(objects[0])["resourceVersion"]
    columns = [dict(c) for c in columns]
    return {
        "kind": "Table",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": metadata,
        "columnDefinitions": columns,
        "rows": rows,
    }
