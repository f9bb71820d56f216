"""Pod Security Admission, level ``baseline``: the checks the API server runs on a pod created in a
namespace labelled ``pod-security.kubernetes.io/enforce: baseline``.

A faithful port of k8s.io/pod-security-admission (github.com/kubernetes/pod-security-admission at
8f84a87c, ``policy/check_*.go``), as of policy version v1.33: the same checks, in the same order
(``policy/registry.go`` runs them in file-name order), with the same reasons and details, joined as
``policy.AggregateCheckResult.ForbiddenDetail`` joins them, in the message ``admission/admission.go``
returns: ``violates PodSecurity "baseline:v1.33": privileged (container "x" must not set
securityContext.privileged=true), host namespaces (hostPID=true)``.

Ported checks and their upstream files: appArmorProfile (check_appArmorProfile.go), capabilities
(check_capabilities_baseline.go), hostNamespaces (check_hostNamespaces.go), hostPathVolumes
(check_hostPathVolumes.go), hostPorts (check_hostPorts.go), privileged (check_privileged.go),
procMount (check_procMount_baseline.go, the v1.0 rule), seLinuxOptions (check_seLinuxOptions.go, v1.31),
seccompProfile (check_seccompProfile_baseline.go, v1.19), sysctls (check_sysctls.go, v1.32),
hostProcess (check_windowsHostProcess.go). hostProbesAndhostLifecycle starts at v1.34 and is not here:
a namespace pinned to a later version is evaluated as v1.33 (:data:`POLICY_VERSION`).

Pods are plain dicts as the API serves them (camelCase keys).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

LABEL_PREFIX = "pod-security.kubernetes.io/"
POLICY_VERSION = (1, 33)
LEVELS = ("privileged", "baseline", "restricted")

# check_capabilities_baseline.go: capabilities_allowed_1_0
CAPABILITIES_ALLOWED = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
# check_seLinuxOptions.go: selinuxAllowedTypes1_31
SELINUX_TYPES_ALLOWED = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
# check_sysctls.go: sysctlsAllowedV1Dot32
SYSCTLS_ALLOWED = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_wmem",
    }
)
APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"


@dataclass(frozen=True)
class Forbidden:
    """One failed check: its reason (``privileged``) and detail (which containers, which values)."""

    reason: str
    detail: str

    def __str__(self) -> str:
        return f"{self.reason} ({self.detail})" if self.detail else self.reason


@dataclass(frozen=True)
class Verdict:
    """Whether a policy admits a pod; ``str()`` is the API server's message when it does not."""

    policy: str
    forbidden: tuple[Forbidden, ...] = ()

    @property
    def allowed(self) -> bool:
        return not self.forbidden

    @property
    def reasons(self) -> tuple[str, ...]:
        return tuple(f.reason for f in self.forbidden)

    def __str__(self) -> str:
        if self.allowed:
            return f'allowed by PodSecurity "{self.policy}"'
        return f'violates PodSecurity "{self.policy}": ' + ", ".join(map(str, self.forbidden))


def _containers(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """visitor.go visitContainers: init containers, containers, ephemeral containers."""
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _sc(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("securityContext") or {}


def _plural(singular: str, plural: str, n: int) -> str:
    return singular if n == 1 else plural


def _quote(items: list[str]) -> str:
    """helpers.go joinQuote."""
    return '"' + '", "'.join(items) + '"' if items else ""


def _setters(pod_bad: bool, containers: list[str]) -> list[str]:
    setters = ["pod"] if pod_bad else []
    if containers:
        setters.append(f"{_plural('container', 'containers', len(containers))} {_quote(containers)}")
    return setters


def _profile_types(spec: Mapping[str, Any], field: str) -> tuple[bool, list[str], set[str]]:
    """(pod sets a bad type, containers that do, the bad types) for ``securityContext.<field>.type``:
    only RuntimeDefault and Localhost are allowed (seccomp and AppArmor alike)."""
    allowed = ("RuntimeDefault", "Localhost")
    values: set[str] = set()
    pod_type = (_sc(spec).get(field) or {}).get("type")
    pod_bad = pod_type is not None and pod_type not in allowed
    if pod_bad:
        values.add(str(pod_type))
    bad = []
    for c in _containers(spec):
        profile = (_sc(c).get(field) or {}).get("type")
        if profile is not None and profile not in allowed:
            bad.append(c["name"])
            values.add(str(profile))
    return pod_bad, bad, values


def _app_armor(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Forbidden | None:
    pod_bad, bad, values = _profile_types(spec, "appArmorProfile")
    annotations = sorted(
        f'{k}="{v}"'
        for k, v in (meta.get("annotations") or {}).items()
        if k.startswith(APPARMOR_ANNOTATION_PREFIX)
        and not (not v or v == "runtime/default" or v.startswith("localhost/"))
    )
    setters = _setters(pod_bad, bad)
    if annotations:
        setters.append(_plural("annotation", "annotations", len(annotations)))
    if not setters:
        return None
    listed = sorted(values) + annotations
    reason = _plural("forbidden AppArmor profile", "forbidden AppArmor profiles", len(listed))
    return Forbidden(
        reason, f"{' and '.join(setters)} must not set AppArmor profile type to {_quote(listed)}"
    )


def _capabilities(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Forbidden | None:
    bad, extra = [], set()
    for c in _containers(spec):
        added = set((_sc(c).get("capabilities") or {}).get("add") or []) - CAPABILITIES_ALLOWED
        if added:
            bad.append(c["name"])
            extra |= added
    if not bad:
        return None
    detail = f"{_plural('container', 'containers', len(bad))} {_quote(bad)} must not include "
    return Forbidden(
        "non-default capabilities", detail + f"{_quote(sorted(extra))} in securityContext.capabilities.add"
    )


def _host_namespaces(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Forbidden | None:
    shared = [f"{key}=true" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    return Forbidden("host namespaces", ", ".join(shared)) if shared else None


def _host_path_volumes(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Forbidden | None:
    names = [v["name"] for v in spec.get("volumes") or [] if v.get("hostPath") is not None]
    return (
        Forbidden("hostPath volumes", f"{_plural('volume', 'volumes', len(names))} {_quote(names)}")
        if names
        else None
    )


def _host_ports(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Forbidden | None:
    bad, ports = [], set()
    for c in _containers(spec):
        used = {str(p["hostPort"]) for p in c.get("ports") or [] if p.get("hostPort")}
        if used:
            bad.append(c["name"])
            ports |= used
    if not bad:
        return None
    detail = (
        f"{_plural('container', 'containers', len(bad))} {_quote(bad)} {_plural('uses', 'use', len(bad))} "
        f"{_plural('hostPort', 'hostPorts', len(ports))} {', '.join(sorted(ports))}"
    )
    return Forbidden("hostPort", detail)


def _privileged(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Forbidden | None:
    bad = [c["name"] for c in _containers(spec) if _sc(c).get("privileged") is True]
    if not bad:
        return None
    detail = f"{_plural('container', 'containers', len(bad))} {_quote(bad)} must not set securityContext.privileged=true"
    return Forbidden("privileged", detail)


def _proc_mount(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Forbidden | None:
    bad, kinds = [], set()
    for c in _containers(spec):
        mount = _sc(c).get("procMount")
        if mount is not None and mount != "Default":
            bad.append(c["name"])
            kinds.add(mount)
    if not bad:
        return None
    detail = f"{_plural('container', 'containers', len(bad))} {_quote(bad)} must not set securityContext.procMount to "
    return Forbidden("procMount", detail + _quote(sorted(kinds)))


def _se_linux(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Forbidden | None:
    types: set[str] = set()
    flags = {"user": False, "role": False}

    def valid(opts: Mapping[str, Any] | None) -> bool:
        if opts is None:
            return True
        ok = opts.get("type", "") in SELINUX_TYPES_ALLOWED
        if not ok:
            types.add(opts.get("type", ""))
        for key in ("user", "role"):
            if opts.get(key):
                flags[key], ok = True, False
        return ok

    pod_bad = not valid(_sc(spec).get("seLinuxOptions"))
    bad = [c["name"] for c in _containers(spec) if not valid(_sc(c).get("seLinuxOptions"))]
    setters = _setters(pod_bad, bad)
    if not setters:
        return None
    data = [f"{_plural('type', 'types', len(types))} {_quote(sorted(types))}"] if types else []
    data += [f"{key} may not be set" for key in ("user", "role") if flags[key]]
    detail = f"{' and '.join(setters)} set forbidden securityContext.seLinuxOptions: {'; '.join(data)}"
    return Forbidden("seLinuxOptions", detail)


def _seccomp(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Forbidden | None:
    pod_bad, bad, values = _profile_types(spec, "seccompProfile")
    setters = _setters(pod_bad, bad)
    if not setters:
        return None
    detail = f"{' and '.join(setters)} must not set securityContext.seccompProfile.type to {_quote(sorted(values))}"
    return Forbidden("seccompProfile", detail)


def _sysctls(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Forbidden | None:
    names = [s["name"] for s in _sc(spec).get("sysctls") or [] if s.get("name") not in SYSCTLS_ALLOWED]
    return Forbidden("forbidden sysctls", ", ".join(names)) if names else None


def _host_process(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Forbidden | None:
    def on(obj: Mapping[str, Any]) -> bool:
        return (_sc(obj).get("windowsOptions") or {}).get("hostProcess") is True

    setters = _setters(on(spec), [c["name"] for c in _containers(spec) if on(c)])
    if not setters:
        return None
    return Forbidden(
        "hostProcess", f"{' and '.join(setters)} must not set securityContext.windowsOptions.hostProcess=true"
    )


Check = Callable[[Mapping[str, Any], Mapping[str, Any]], "Forbidden | None"]
# In policy/registry.go's order (the checks register in file-name order).
BASELINE_CHECKS: tuple[Check, ...] = (
    _app_armor,
    _capabilities,
    _host_namespaces,
    _host_path_volumes,
    _host_ports,
    _privileged,
    _proc_mount,
    _se_linux,
    _seccomp,
    _sysctls,
    _host_process,
)


def evaluate_baseline(pod: Mapping[str, Any], policy: str = "baseline:v1.33") -> Verdict:
    """The baseline checks on ``pod`` (a Pod, or anything with ``metadata`` and ``spec``)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    return Verdict(policy, tuple(f for check in BASELINE_CHECKS if (f := check(meta, spec)) is not None))


class PolicyLabelError(ValueError):
    """A namespace's pod-security.kubernetes.io/* label has a value the API server would not parse."""


def enforced_policy(labels: Mapping[str, str]) -> tuple[str, str] | None:
    """``(level, version)`` a namespace's labels enforce (``None``: no enforce label, all pods pass).

    Raises :class:`PolicyLabelError` for a level or version the API server rejects on the namespace.
    """
    level = labels.get(f"{LABEL_PREFIX}enforce")
    if level is None:
        return None
    if level not in LEVELS:
        raise PolicyLabelError(f"{LABEL_PREFIX}enforce: {level!r} is not one of {', '.join(LEVELS)}")
    version = labels.get(f"{LABEL_PREFIX}enforce-version", "latest")
    if version != "latest":
        major, _, minor = version.removeprefix("v").partition(".")
        if not version.startswith("v") or not (major.isdigit() and minor.isdigit()):
            raise PolicyLabelError(
                f"{LABEL_PREFIX}enforce-version: {version!r} is not 'latest' or v<major>.<minor>"
            )
    return level, version


def pod_admission(labels: Mapping[str, str], pod: Mapping[str, Any]) -> tuple[str | None, list[str]]:
    """What the API server answers to creating ``pod`` in a namespace with ``labels``: the refusal
    (``None`` when admitted) and warnings for the client.

    Only the baseline checks are ported: a namespace enforcing ``restricted`` gets them (every
    baseline violation is a restricted one too) and a warning saying that the rest is not checked.
    A label the API server would not parse refuses the pod, naming the label.
    """
    try:
        policy = enforced_policy(labels)
    except PolicyLabelError as e:
        return f"invalid Pod Security label on the namespace: {e}", []
    if policy is None or policy[0] == "privileged":
        return None, []
    level, version = policy
    warnings = []
    if level == "restricted":
        warnings.append(f'PodSecurity "restricted:{version}": this API server checks only its baseline rules')
    verdict = evaluate_baseline(pod, f"{level}:{version}")
    return (None if verdict.allowed else str(verdict)), warnings
