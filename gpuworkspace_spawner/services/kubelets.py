"""How the hub services reach the kubelets (``:10250``) without handing a token to a peer they did not verify.

The disk service (volume stats, ``/metrics``) and the attribution service (``/metrics/resource``) read
every node's kubelet on its InternalIP. A kubelet authenticates the caller with a bearer token
(webhook authentication) and authorizes ``get`` on ``nodes/metrics``. That token is the service's
Kubernetes credential: whoever receives it can do whatever the service may do in the API. So:

- the token is sent **only** over a TLS connection whose serving certificate was verified against a CA
  (with the host name, i.e. the node IP, checked against the certificate); a handshake that fails never
  sends the request, so the token never leaves;
- the CA is ``--kubelet-ca`` if given, else the cluster CA the service's Kubernetes client trusts (the
  ServiceAccount's ``ca.crt`` in a pod, the kubeconfig's ``certificate-authority`` elsewhere). Kubelets
  whose serving certificates are signed by the cluster CA (``serverTLSBootstrap: true`` and approved
  CSRs, as kubeadm, OpenShift, GKE and EKS set them up) verify with no option at all;
- with no CA to verify against, or one that cannot be read, nothing is sent and every node's figure is
  reported unavailable with the reason (fail closed); a peer that fails verification gets no request;
- ``http`` (``--kubelet-scheme http``: the kubelet's deprecated read-only port, or a test cluster)
  sends no token at all.

Why not the API server's node proxy (``/api/v1/nodes/{node}/proxy/metrics``, which the API server
reaches with its own verified client certificate)? It needs RBAC ``nodes/proxy``, which is far broader
than ``nodes/metrics``: through the proxy it reaches every kubelet endpoint, including ``/exec``,
``/run`` and ``/attach`` of every pod on every node (a ``get`` on ``nodes/proxy`` suffices for some of
them over WebSockets). A service bug would then be a cluster compromise; ``nodes/metrics`` only reads
metrics.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tornado.httpclient import HTTPClientError, HTTPRequest


class KubeletTrustError(Exception):
    """No kubelet can be scraped safely (no CA to verify against); the message says why."""


@dataclass(frozen=True)
class KubeletAccess:
    """How to reach the kubelets; the command line fills it."""

    scheme: str = "https"
    port: int = 10250
    ca_file: Path | None = None  # None: the cluster CA of the Kubernetes client configuration
    timeout_s: float = 5.0


@dataclass(frozen=True)
class Trust:
    """What one scrape round sends with: a verifying TLS context and the Authorization header.

    Built by :func:`resolve_trust`; with ``https`` there is always a context that verifies (never a
    token without one)."""

    ssl_context: ssl.SSLContext | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    ca: str = ""  # the CA file the context trusts, for error messages


def build_trust(access: KubeletAccess, ca: str | None, authorization: str | None) -> Trust:
    """The :class:`Trust` for ``access`` given the client's CA file and token (pure but for reading the CA).

    Raises :class:`KubeletTrustError` when ``https`` has no readable CA: then nothing is sent."""
    if access.scheme == "http":
        return Trust()  # plain HTTP: never a token
    ca_file = str(access.ca_file) if access.ca_file is not None else ca
    if not ca_file:
        raise KubeletTrustError(
            "no CA to verify kubelet serving certificates (set --kubelet-ca, or run with a Kubernetes "
            "configuration that names the cluster CA); not scraping, no token sent"
        )
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise KubeletTrustError(
            f"cannot read the kubelet CA {ca_file}: {exc}; not scraping, no token sent"
        ) from exc
    context.check_hostname, context.verify_mode = True, ssl.CERT_REQUIRED
    headers = {"Authorization": authorization} if authorization else {}
    return Trust(context, headers, ca_file)


async def resolve_trust(access: KubeletAccess) -> Trust:
    """:func:`build_trust` with the current client credentials (tokens rotate: call it each round)."""
    if access.scheme == "http":
        return Trust()
    from ..k8s.gateway import client_credentials  # noqa: PLC0415 - the services' lean imports

    ca, authorization = await client_credentials()
    return build_trust(access, ca, authorization)


def kubelet_request(access: KubeletAccess, trust: Trust, address: str, path: str) -> HTTPRequest:
    """A GET of ``path`` on the kubelet at ``address``; the token only with a verifying context."""
    host = f"[{address}]" if ":" in address else address
    verified = trust.ssl_context is not None and trust.ssl_context.verify_mode == ssl.CERT_REQUIRED
    return HTTPRequest(
        f"{access.scheme}://{host}:{access.port}{path}",
        headers=dict(trust.headers) if verified else {},
        request_timeout=access.timeout_s,
        connect_timeout=access.timeout_s,
        ssl_options=trust.ssl_context,
    )


def describe_failure(exc: BaseException, trust: Trust) -> str:
    """A scrape failure in words; a certificate that did not verify says so (and that nothing was sent)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        detail = exc.verify_message or exc.reason or str(exc)
        return f"serving certificate not verified against {trust.ca}: {detail}; no token sent"
    if isinstance(exc, ssl.SSLError):
        return f"TLS handshake failed ({exc.reason or exc}); no token sent"
    if isinstance(exc, HTTPClientError):
        return f"HTTP {exc.code}" if exc.code != 599 else str(exc.message or exc)  # noqa: PLR2004 - no answer
    return str(exc) or type(exc).__name__
