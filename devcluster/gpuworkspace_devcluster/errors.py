"""Kubernetes ``Status`` errors as the API server returns them."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An API failure that becomes a ``kind: Status`` response body.

    ``reason`` is the machine-readable StatusReason (``NotFound``, ``AlreadyExists``,
    ``Conflict``, ``Invalid``, ``BadRequest``, ``Gone``, ``Forbidden``, ``TooManyRequests``,
    ``MethodNotAllowed``, ``UnsupportedMediaType``, ``InternalError``, ``Timeout``...).
    """

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after = retry_after

    def to_status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        details = dict(self.details or {})
        if self.retry_after is not None:
            details.setdefault("retryAfterSeconds", self.retry_after)
        if details:
            body["details"] = details
        return body


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(
        404,
        "NotFound",
        f'{qualified} "{name}" not found',
        details={"name": name, "group": group, "kind": resource},
    )


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified} "{name}" already exists',
        details={"name": name, "group": group, "kind": resource},
    )


def conflict(resource: str, name: str, group: str = "") -> ApiError:
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        details={"name": name, "group": group, "kind": resource},
    )


def precondition_failed(
    kind: str, name: str, field: str, wanted: str, found: str, group: str = ""
) -> ApiError:
    """409 for a delete whose ``uid`` or ``resourceVersion`` precondition does not hold.

    Worded as ``rest.BeforeDelete`` (k8s.io/apiserver ``pkg/registry/rest/delete.go``) words it: the
    conflict is raised on the object's *kind* (``ConfigMap``, ``VirtualMachine.kubevirt.io``).
    """
    label, why = {
        "uid": ("UID", "deleted and then recreated"),
        "resourceVersion": ("ResourceVersion", "modified"),
    }[field]
    qualified = f"{kind}.{group}" if group else kind
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified} "{name}": the {label} in the precondition ({wanted}) '
        f"does not match the {label} in record ({found}). The object might have been {why}",
        details={"name": name, "group": group, "kind": kind},
    )


def invalid(kind: str, name: str, causes: list[dict[str, str]], group: str = "") -> ApiError:
    """422 Invalid; each cause is ``{"reason": "FieldValueInvalid", "message": ..., "field": ...}``."""
    parts = [f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes]
    text = parts[0] if len(parts) == 1 else f"[{', '.join(parts)}]"  # the apiserver's aggregate format
    qualified = f"{kind}.{group}" if group else kind
    return ApiError(
        422,
        "Invalid",
        f'{qualified} "{name}" is invalid: {text}',
        details={"name": name, "group": group, "kind": kind, "causes": causes},
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)
