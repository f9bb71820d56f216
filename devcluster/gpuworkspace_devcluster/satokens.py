"""Bound ServiceAccount tokens: the TokenRequest API and the API server's token authenticator.

As kubernetes does them (cited in docs/explanation/devcluster-simulation.md):

- ``POST /api/v1/namespaces/<ns>/serviceaccounts/<name>/token`` (``pkg/registry/core/serviceaccount/
  storage/token.go`` ``TokenREST.Create``): the ServiceAccount must exist; ``spec.expirationSeconds``
  defaults to 3600 and may not be under 600; ``spec.audiences`` default to the API server's;
  ``spec.boundObjectRef`` (a Pod or a Secret) must exist, match its ``uid`` and, for a Pod, run as that
  ServiceAccount. A request for 3607 s (what the ServiceAccount admission plugin asks for) gets a token
  valid for a year with a ``warnafter`` claim (``--service-account-extend-token-expiration``), while
  ``status.expirationTimestamp`` says the 3607 s asked for.
- the claims are the real ones (``pkg/serviceaccount/claims.go``: ``iss``, ``sub``, ``aud``, ``exp``,
  ``iat``, ``nbf``, ``jti`` and the ``kubernetes.io`` block naming the namespace, ServiceAccount and bound
  object with their uids); the authenticator (``validator.Validate``) refuses an expired token, one for
  another audience, one whose ServiceAccount or bound Pod/Secret is gone, was recreated (uid) or was
  deleted more than a minute ago (``jwt.DefaultLeeway``, also allowed on ``exp``/``nbf``); it authenticates the rest as ``system:serviceaccount:<ns>:<name>``
  with the groups ``system:serviceaccounts``, ``system:serviceaccounts:<ns>``, ``system:authenticated``.

The one divergence: tokens are signed with HS256 under a key kept in the state dir, not RS256 under
``--service-account-signing-key-file``; nothing but this API server verifies them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson

from . import errors
from .errors import ApiError
from .rbac import UserInfo
from .resources import find
from .store import Obj, Store

ISSUER = "https://kubernetes.default.svc.cluster.local"  # kube-apiserver's default --service-account-issuer
API_AUDIENCES = (ISSUER,)  # --api-audiences defaults to the issuer
DEFAULT_EXPIRATION_S = 3600  # SetDefaults_TokenRequestSpec
MIN_EXPIRATION_S = 600  # ValidateTokenRequest: "may not specify a duration less than 10 minutes"
WARN_ONLY_EXPIRATION_S = 3607  # serviceaccount.WarnOnlyBoundTokenExpirationSeconds
EXTENDED_EXPIRATION_S = 365 * 24 * 3600  # serviceaccount.ExpirationExtensionSeconds
LEEWAY_S = 60  # go-jose jwt.DefaultLeeway: for exp/nbf, and objects deleted less than a minute ago
_BOUND_KINDS = {"Pod": "pods", "Secret": "secrets"}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_rfc3339(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def _rt(plural: str) -> Any:
    rt = find("", "v1", plural)
    assert rt is not None
    return rt


def _invalid(field: str, value: Any, message: str) -> ApiError:
    cause = {"reason": "FieldValueInvalid", "field": field, "message": f"Invalid value: {value}: {message}"}
    return errors.invalid("TokenRequest", "", [cause], "authentication.k8s.io")


class TokenIssuer:
    """Signs and validates ServiceAccount tokens with one key (``key``: at least 32 random bytes)."""

    def __init__(self, key: bytes, clock: Callable[[], float] = time.time) -> None:
        self._key, self._clock = key, clock
        self._kid = _b64(hashlib.sha256(key).digest()[:16])

    # ---------------------------------------------------------------- signing
    def _sign(self, claims: Obj) -> str:
        head = _b64(orjson.dumps({"alg": "HS256", "kid": self._kid}))
        body = _b64(orjson.dumps(claims))
        mac = hmac.new(self._key, f"{head}.{body}".encode(), hashlib.sha256).digest()
        return f"{head}.{body}.{_b64(mac)}"

    def _claims(self, token: str) -> Obj | None:
        parts = token.split(".")
        if len(parts) != len(("header", "claims", "signature")):
            return None
        mac = hmac.new(self._key, f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256).digest()
        try:
            if not hmac.compare_digest(_unb64(parts[2]), mac):
                return None
            claims = orjson.loads(_unb64(parts[1]))
        except (ValueError, orjson.JSONDecodeError):
            return None
        return claims if isinstance(claims, dict) else None

    # ---------------------------------------------------------- TokenRequest
    def request(self, store: Store, namespace: str, name: str, body: Obj) -> Obj:
        """``TokenREST.Create``: the TokenRequest answered, with ``status.token``; ApiError otherwise."""
        if not isinstance(body, dict) or not isinstance(body.get("spec") or {}, dict):
            raise errors.bad_request("a TokenRequest body must be an object with an object spec")
        sa = store.get(_rt("serviceaccounts"), namespace, name)
        if sa is None:
            raise errors.not_found("serviceaccounts", name)
        spec = dict(body.get("spec") or {})
        seconds = spec.get("expirationSeconds", DEFAULT_EXPIRATION_S)
        if not isinstance(seconds, int) or isinstance(seconds, bool):
            raise _invalid("spec.expirationSeconds", seconds, "must be an integer")
        if seconds < MIN_EXPIRATION_S:
            raise _invalid(
                "spec.expirationSeconds", seconds, "may not specify a duration less than 10 minutes"
            )
        audiences = spec.get("audiences") or list(API_AUDIENCES)
        if not isinstance(audiences, list) or not all(isinstance(a, str) for a in audiences):
            raise _invalid("spec.audiences", audiences, "must be a list of strings")
        bound = self._bound_object(store, namespace, name, spec.get("boundObjectRef"))
        now = int(self._clock())
        expires = now + seconds
        lifetime = EXTENDED_EXPIRATION_S if seconds == WARN_ONLY_EXPIRATION_S else seconds
        private: Obj = {
            "namespace": namespace,
            "serviceaccount": {"name": name, "uid": sa["metadata"]["uid"]},
        }
        if bound is not None:
            private[bound[0]] = {"name": bound[1], "uid": bound[2]}
        if lifetime != seconds:
            private["warnafter"] = expires
        claims = {
            "aud": audiences,
            "exp": now + lifetime,
            "iat": now,
            "iss": ISSUER,
            "jti": str(uuid.uuid4()),
            "kubernetes.io": private,
            "nbf": now,
            "sub": f"system:serviceaccount:{namespace}:{name}",
        }
        spec["audiences"], spec["expirationSeconds"] = audiences, seconds
        if bound is not None:
            spec["boundObjectRef"] = {**spec["boundObjectRef"], "apiVersion": "v1", "uid": bound[2]}
        return {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": _rfc3339(now)},
            "spec": spec,
            "status": {"token": self._sign(claims), "expirationTimestamp": _rfc3339(expires)},
        }

    def _bound_object(
        self, store: Store, namespace: str, sa_name: str, ref: Any
    ) -> tuple[str, str, str] | None:
        """(claim key, name, uid) of the object the token is bound to, checked as token.go checks it."""
        if not ref:
            return None
        if not isinstance(ref, dict) or ref.get("kind") not in _BOUND_KINDS:
            raise _invalid(
                "spec.boundObjectRef.kind",
                (ref or {}).get("kind") if isinstance(ref, dict) else ref,
                'supported values: "Pod", "Secret"',
            )
        plural = _BOUND_KINDS[ref["kind"]]
        obj = store.get(_rt(plural), namespace, str(ref.get("name", "")))
        if obj is None:
            raise errors.not_found(plural, str(ref.get("name", "")))
        uid = obj["metadata"]["uid"]
        if ref.get("uid") and ref["uid"] != uid:
            raise ApiError(
                409,
                "Conflict",
                f"the UID in the bound object reference ({ref['uid']}) does not match the UID in record. "
                "The object might have been deleted and then recreated",
            )
        if plural == "pods" and (obj.get("spec") or {}).get("serviceAccountName", "default") != sa_name:
            raise errors.bad_request(
                f'cannot bind token for serviceaccount "{sa_name}" to pod running with different '
                "serviceaccount name."
            )
        return ("pod" if plural == "pods" else "secret", obj["metadata"]["name"], uid)

    # -------------------------------------------------------- authentication
    def authenticate(self, store: Store, token: str) -> UserInfo | None:
        """The ServiceAccount a token authenticates as, or None (401) as ``validator.Validate`` decides."""
        claims = self._claims(token)
        if claims is None or claims.get("iss") != ISSUER:
            return None
        now = self._clock()
        if now + LEEWAY_S < float(claims.get("nbf", 0)) or now - LEEWAY_S >= float(claims.get("exp", 0)):
            return None
        if not set(claims.get("aud") or ()) & set(API_AUDIENCES):
            return None
        private = claims.get("kubernetes.io") or {}
        namespace, sa_ref = private.get("namespace", ""), private.get("serviceaccount") or {}
        sa = store.get(_rt("serviceaccounts"), namespace, sa_ref.get("name", ""))
        if not _live(sa, sa_ref.get("uid"), now):
            return None
        for key, plural in (("pod", "pods"), ("secret", "secrets")):
            ref = private.get(key)
            if ref is not None:
                obj = store.get(_rt(plural), namespace, ref.get("name", ""))
                if not _live(obj, ref.get("uid"), now):
                    return None
        return UserInfo.service_account(namespace, sa_ref.get("name", ""))


def _live(obj: Obj | None, uid: Any, now: float) -> bool:
    """The object exists with that uid, and was not deleted more than the leeway ago."""
    if obj is None or obj["metadata"].get("uid") != uid:
        return False
    deleted = obj["metadata"].get("deletionTimestamp")
    return not deleted or _parse_rfc3339(deleted) + LEEWAY_S > now
