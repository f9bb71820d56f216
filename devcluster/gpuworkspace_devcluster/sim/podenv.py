"""A container's environment as the kubelet builds it (``makeEnvironmentVariables``). Pure.

``envFrom`` first (later sources win), then ``env`` in order, each value with ``$(VAR)`` expansion over
what is defined so far; ``valueFrom`` resolves fieldRef, resourceFieldRef, secretKeyRef and
configMapKeyRef through lookups the caller passes. Of the service-link variables, only the master
service's (``KUBERNETES_SERVICE_HOST``...) are set, as ``EnvSources.service_env`` gives them.
Errors carry the kubelet's message (the container then waits with ``CreateContainerConfigError``).
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from ..quantity import QuantityError, parse_quantity

Obj = dict[str, Any]
Lookup = Callable[[str, str], Obj | None]  # (namespace, name) -> object or None
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


class EnvError(Exception):
    """The container cannot be configured: ``message`` is what the kubelet reports."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class EnvSources:
    secret: Lookup
    config_map: Lookup
    node_allocatable: Mapping[str, str]  # what resourceFieldRef falls back to without a limit
    # (pod, projected serviceAccountToken source) -> the token (sim/tokenmanager.py); None: no tokens here
    token: Callable[[Obj, Obj], bytes] | None = None
    # the master service's variables (KUBERNETES_SERVICE_HOST, ...) every container gets
    service_env: Mapping[str, str] = field(default_factory=dict)


def master_service_env(host: str, port: int) -> dict[str, str]:
    """The ``kubernetes`` Service's variables as the kubelet sets them for every container
    (``getServiceEnvVarMap`` always includes the master service; ``envvars.FromServices`` names them),
    pointing at the API server the pods reach."""
    address = f"tcp://{host}:{port}"
    prefix = f"KUBERNETES_PORT_{port}_TCP"
    return {
        "KUBERNETES_SERVICE_HOST": host,
        "KUBERNETES_SERVICE_PORT": str(port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(port),
        "KUBERNETES_PORT": address,
        prefix: address,
        f"{prefix}_PROTO": "tcp",
        f"{prefix}_PORT": str(port),
        f"{prefix}_ADDR": host,
    }


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: defined names are replaced, ``$$`` escapes, the rest stays."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i) and (end := text.find(")", i + 2)) != -1:
            name = text[i + 2 : end]
            out.append(env[name] if name in env else text[i : end + 1])
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def expand_all(items: Sequence[str], env: Mapping[str, str]) -> list[str]:
    return [expand(s, env) for s in items]


def build_env(pod: Obj, container: Obj, sources: EnvSources) -> dict[str, str]:
    """The container's own variables (envFrom, env), in the kubelet's precedence."""
    ns = pod["metadata"].get("namespace", "default")
    env: dict[str, str] = {}
    for src in container.get("envFrom") or []:
        prefix = src.get("prefix", "")
        env.update(
            {prefix + k: v for k, v in env_from(ns, src, sources).items() if _ENV_NAME.match(prefix + k)}
        )
    for item in container.get("env") or []:
        name = item["name"]
        if "valueFrom" in item:
            value = _value_from(pod, container, item["valueFrom"], sources)
            if value is None:
                continue  # an optional key that is absent
            env[name] = value
        else:
            env[name] = expand(str(item.get("value", "")), {**sources.service_env, **env})
    for name, value in sources.service_env.items():  # service variables never override the container's own
        env.setdefault(name, value)
    return env


def _value_from(pod: Obj, container: Obj, vf: Obj, sources: EnvSources) -> str | None:
    ns = pod["metadata"].get("namespace", "default")
    if "fieldRef" in vf:
        return field_value(pod, vf["fieldRef"]["fieldPath"])
    if "resourceFieldRef" in vf:
        return resource_value(pod, container, vf["resourceFieldRef"], sources.node_allocatable)
    for key, kind, lookup in (
        ("secretKeyRef", "secret", sources.secret),
        ("configMapKeyRef", "configmap", sources.config_map),
    ):
        if key in vf:
            ref = vf[key]
            data = object_data(lookup(ns, ref.get("name", "")), kind)
            if data is None:
                if ref.get("optional"):
                    return None
                raise EnvError(f'{kind} "{ref.get("name", "")}" not found')
            if ref["key"] not in data:
                if ref.get("optional"):
                    return None
                what = "Secret" if kind == "secret" else "ConfigMap"
                raise EnvError(f"couldn't find key {ref['key']} in {what} {ns}/{ref.get('name', '')}")
            return data[ref["key"]]
    return ""


def object_data(obj: Obj | None, kind: str) -> dict[str, str] | None:
    """A Secret's decoded data or a ConfigMap's data (binaryData decoded too); None when absent."""
    if obj is None:
        return None
    if kind == "secret":
        return {k: base64.b64decode(v).decode(errors="replace") for k, v in (obj.get("data") or {}).items()}
    out = {k: str(v) for k, v in (obj.get("data") or {}).items()}
    for k, v in (obj.get("binaryData") or {}).items():
        out[k] = base64.b64decode(v).decode(errors="replace")
    return out


def env_from(ns: str, src: Obj, sources: EnvSources) -> dict[str, str]:
    """One ``envFrom`` source's variables (unprefixed); a missing non-optional source is an error."""
    if "configMapRef" in src:
        ref, kind, lookup = src["configMapRef"], "configmap", sources.config_map
    elif "secretRef" in src:
        ref, kind, lookup = src["secretRef"], "secret", sources.secret
    else:
        return {}
    data = object_data(lookup(ns, ref.get("name", "")), kind)
    if data is None:
        if ref.get("optional"):
            return {}
        raise EnvError(f'{kind} "{ref.get("name", "")}" not found')
    return data


_LABELS = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def field_value(pod: Obj, path: str) -> str:
    """The downward API's fieldRef values (as for env and downwardAPI volumes)."""
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    m = _LABELS.match(path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    if path in ("metadata.labels", "metadata.annotations"):
        items = meta.get(path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": status.get("hostIP", ""),
        "status.podIP": status.get("podIP", ""),
        "status.hostIPs": ",".join(i["ip"] for i in status.get("hostIPs") or []),
        "status.podIPs": ",".join(i["ip"] for i in status.get("podIPs") or []),
    }
    return str(simple.get(path, ""))


def resource_value(pod: Obj, container: Obj, ref: Obj, allocatable: Mapping[str, str]) -> str:
    """resourceFieldRef: the container's limit (node allocatable without one) or request, by divisor."""
    if ref.get("containerName"):
        for c in (pod.get("spec") or {}).get("containers") or []:
            if c.get("name") == ref["containerName"]:
                container = c
    kind, _, resource = ref["resource"].partition(".")
    res = container.get("resources") or {}
    raw = (res.get(kind) or {}).get(resource)
    if raw is None and kind == "limits":
        raw = allocatable.get(resource)
    try:
        value = parse_quantity(raw) if raw is not None else Decimal(0)
        divisor = parse_quantity(ref.get("divisor") or "1") or Decimal(1)
    except QuantityError as exc:
        raise EnvError(str(exc)) from exc
    return str(math.ceil(value / divisor))
