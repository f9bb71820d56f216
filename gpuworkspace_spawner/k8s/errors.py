"""The project's Kubernetes error tree, mapped from kubernetes_asyncio's ``ApiException``.

Callers above the gateway catch these, never the client library's exceptions (like kopf's
``_cogs/clients/errors.py`` or httpx's ``map_httpcore_exceptions``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

from kubernetes_asyncio.client.exceptions import ApiException


class KubernetesError(Exception):
    """An API call failed; ``status`` is the HTTP status, ``message`` the API server's Status message."""

    def __init__(self, status: int, message: str, reason: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}".strip())
        self.status = status
        self.message = message
        self.reason = reason


class NotFound(KubernetesError):
    pass


class Conflict(KubernetesError):
    """409: AlreadyExists, a resourceVersion/uid precondition failed, or an update conflict."""


class Forbidden(KubernetesError):
    """403: RBAC refused the request, or an admission check (e.g. ResourceQuota) did."""

    @property
    def quota_exceeded(self) -> bool:
        return "exceeded quota" in self.message


class Invalid(KubernetesError):
    """422: the object failed validation."""


class Unavailable(KubernetesError):
    """429, 5xx or no answer: worth retrying."""


_TOO_MANY_REQUESTS, _SERVER_ERROR = 429, 500
_BY_STATUS: dict[int, type[KubernetesError]] = {404: NotFound, 409: Conflict, 403: Forbidden, 422: Invalid}


def map_api_exception(exc: ApiException) -> KubernetesError:
    return error_for_status(int(exc.status or 0), exc.body, str(exc.reason or ""))


def error_for_status(status: int, body: bytes | str | None, reason: str = "") -> KubernetesError:
    """Our error for an API answer with a non-2xx ``status`` and its (Status object) ``body``."""
    message = reason
    if body:
        try:
            decoded = json.loads(body)
            message, reason = decoded.get("message", message), decoded.get("reason", reason)
        except (ValueError, AttributeError):
            message = (body.decode(errors="replace") if isinstance(body, bytes) else str(body))[:500]
    cls = _BY_STATUS.get(
        status, Unavailable if status in (0, _TOO_MANY_REQUESTS) or status >= _SERVER_ERROR else None
    )
    return (cls or KubernetesError)(status, message, reason)


@contextmanager
def api_errors() -> Iterator[None]:
    """Re-raise the client library's ApiException as our own error, chained."""
    try:
        yield
    except ApiException as exc:
        raise map_api_exception(exc) from exc


def as_kubernetes_error(exc: BaseException) -> KubernetesError | None:
    """Our error for ``exc`` when it is (or already maps to) an API error, else None."""
    if isinstance(exc, KubernetesError):
        return exc
    if isinstance(exc, ApiException):
        return map_api_exception(exc)
    return None


def is_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` is the API server's 429/5xx (or no answer): worth repeating the request."""
    return isinstance(as_kubernetes_error(exc), Unavailable)


P = ParamSpec("P")
T = TypeVar("T")
# Pauses before each repeat of a request the API server answered 429/5xx or did not answer: about 4 s
# in all, so a brief overload or an apiserver restart costs a start a few seconds, not the start.
RETRY_DELAYS_S = (0.2, 0.5, 1.0, 2.0)
_log = logging.getLogger("gpuworkspace.k8s")


def retry_unavailable(call: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """Repeat ``call`` after :class:`Unavailable` (429, 5xx, no answer), as client-go does for 429.

    Only for requests that are safe to repeat: reads, patches, deletes, and creates whose callers
    take ``Conflict`` (the first attempt landed after all) as "it exists".
    """

    @functools.wraps(call)
    async def repeating(*args: P.args, **kwargs: P.kwargs) -> T:
        for delay in RETRY_DELAYS_S:
            try:
                return await call(*args, **kwargs)
            except Unavailable as exc:
                _log.info("%s: %s; again in %.1f s", call.__name__, exc, delay)
                await asyncio.sleep(delay)
        return await call(*args, **kwargs)

    return repeating
