"""The kubelet's token manager (kubernetes ``pkg/kubelet/token/token_manager.go``).

A projected ``serviceAccountToken`` source is filled with a TokenRequest for the pod's ServiceAccount,
bound to the pod (``boundObjectRef``), for the source's ``audience`` (else the API server's) and
``expirationSeconds`` (default 3600). Tokens are cached per pod, ServiceAccount, audience and lifetime,
and requested again once 80 % of their lifetime has passed or they are older than 24 h
(``requiresRefresh``), so the kubelet's periodic remount rewrites the file only then. A failed request is
the volume's ``MountVolume.SetUp failed … : failed to fetch token: …``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ApiError
from ..satokens import TokenIssuer
from ..store import Obj, Store

MAX_TTL_S = 24 * 3600  # maxTTL
REFRESH_FRACTION = 0.8


class TokenError(Exception):
    """The TokenRequest failed: ``message`` is what the kubelet reports."""


@dataclass(frozen=True)
class _Cached:
    token: bytes
    issued: float
    ttl_s: float


class TokenManager:
    def __init__(
        self, store: Store, issuer: Callable[[], TokenIssuer], clock: Callable[[], float] = time.time
    ):
        self.store, self._issuer, self._clock = store, issuer, clock
        self._cache: dict[tuple[str, str, str, int], _Cached] = {}

    def token(self, pod: Obj, source: Obj) -> bytes:
        """The token for ``pod``'s projected ``serviceAccountToken`` ``source``; raises :class:`TokenError`."""
        meta, spec = pod["metadata"], pod.get("spec") or {}
        sa = spec.get("serviceAccountName") or "default"
        audience = str(source.get("audience") or "")
        seconds = int(source.get("expirationSeconds") or 3600)
        key = (meta.get("uid", ""), sa, audience, seconds)
        now = self._clock()
        cached = self._cache.get(key)
        if cached is not None and now - cached.issued < min(cached.ttl_s * REFRESH_FRACTION, MAX_TTL_S):
            return cached.token
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [audience] if audience else [],
                "expirationSeconds": seconds,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "uid": meta.get("uid"),
                },
            },
        }
        try:
            answer = self._issuer().request(self.store, meta.get("namespace", ""), sa, body)
        except ApiError as exc:
            raise TokenError(f"failed to fetch token: {exc.message}") from exc
        token = str(answer["status"]["token"]).encode()
        self._cache[key] = _Cached(token, now, float(seconds))
        return token

    def forget(self, uid: str) -> None:
        """Drop a pod's tokens (``DeleteServiceAccountToken`` once the pod is gone)."""
        for key in [k for k in self._cache if k[0] == uid]:
            del self._cache[key]
