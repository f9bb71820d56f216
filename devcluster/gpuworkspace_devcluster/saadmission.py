"""The ServiceAccount admission plugin (kubernetes ``plugin/pkg/admission/serviceaccount/admission.go``).

On pod create (mirror pods excepted): ``spec.serviceAccountName`` defaults to ``default``; a pod naming a
ServiceAccount that does not exist is refused (403, ``error looking up service account <ns>/<name>:
serviceaccount "<name>" not found``); unless the pod (else the ServiceAccount) says
``automountServiceAccountToken: false`` (``shouldAutomount``), every container and init container gets
the ``kube-api-access-<5 chars>`` projected volume (``TokenVolumeSource``: a 3607 s token, the
``kube-root-ca.crt`` ConfigMap's ``ca.crt``, the namespace) read-only at
``/var/run/secrets/kubernetes.io/serviceaccount``, except a container that already mounts something
there (``mountServiceAccountToken``); the ServiceAccount's ``imagePullSecrets`` are copied when the pod
has none.

``getServiceAccount`` retries the ``default`` ServiceAccount for a while, since the serviceaccount
controller creates it with the namespace; the devcluster's admission is synchronous, so ``ensure_default``
stands for that wait (the caller creates it when the namespace exists and is not terminating).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from .errors import ApiError
from .store import Obj

DEFAULT_SERVICE_ACCOUNT = "default"
TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
VOLUME_PREFIX = "kube-api-access-"
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's utilrand alphabet

Lookup = Callable[[str, str], Obj | None]  # (namespace, name) -> ServiceAccount or None


def token_volume_source() -> Obj:
    """``TokenVolumeSource``: what every automounted pod's ``kube-api-access-*`` volume projects."""
    return {
        "defaultMode": 0o644,
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": ROOT_CA_CONFIGMAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {
                "downwardAPI": {
                    "items": [
                        {
                            "path": "namespace",
                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                        }
                    ]
                }
            },
        ],
    }


def should_automount(service_account: Obj, pod: Obj) -> bool:
    """``shouldAutomount``: the pod's preference wins, then the ServiceAccount's, else true."""
    spec = pod.get("spec") or {}
    if spec.get("automountServiceAccountToken") is not None:
        return bool(spec["automountServiceAccountToken"])
    if service_account.get("automountServiceAccountToken") is not None:
        return bool(service_account["automountServiceAccountToken"])
    return True


def admit_pod(namespace: str, pod: Obj, lookup: Lookup, rng: random.Random) -> None:
    """``Admit`` for a pod being created: mutates ``pod`` in place, or raises the 403 the plugin returns."""
    meta, spec = pod.setdefault("metadata", {}), pod.setdefault("spec", {})
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return
    if not spec.get("serviceAccountName"):
        spec["serviceAccountName"] = DEFAULT_SERVICE_ACCOUNT
    name = spec["serviceAccountName"]
    service_account = lookup(namespace, name)
    if service_account is None:
        pod_name = meta.get("name", "")
        raise ApiError(
            403,
            "Forbidden",
            f'pods "{pod_name}" is forbidden: error looking up service account {namespace}/{name}: '
            f'serviceaccount "{name}" not found',
            details={"name": pod_name, "kind": "pods"},
        )
    if should_automount(service_account, pod):
        mount_token(spec, rng)
    if not spec.get("imagePullSecrets") and service_account.get("imagePullSecrets"):
        spec["imagePullSecrets"] = [{"name": s.get("name", "")} for s in service_account["imagePullSecrets"]]


def mount_token(spec: Obj, rng: random.Random) -> None:
    """``mountServiceAccountToken``: the projected volume (reused if one is there) in every container."""
    volumes = spec.get("volumes") or []
    existing = next((v["name"] for v in volumes if str(v.get("name", "")).startswith(VOLUME_PREFIX)), "")
    name = existing or VOLUME_PREFIX + "".join(rng.choices(_NAME_ALPHABET, k=5))
    mount = {"name": name, "readOnly": True, "mountPath": TOKEN_MOUNT_PATH}
    needs_volume = False
    for field in ("initContainers", "containers"):
        for container in spec.get(field) or []:
            mounts = container.get("volumeMounts") or []
            if any(m.get("mountPath") == TOKEN_MOUNT_PATH for m in mounts):
                continue
            container["volumeMounts"] = [*mounts, dict(mount)]
            needs_volume = True
    if needs_volume and not existing:
        spec["volumes"] = [*volumes, {"name": name, "projected": token_volume_source()}]
