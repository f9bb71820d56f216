"""The only package that talks to the Kubernetes API (kubernetes_asyncio); see gateway.py."""

from .errors import Conflict, Forbidden, Invalid, KubernetesError, NotFound, Unavailable

__all__ = ["Conflict", "Forbidden", "Invalid", "KubernetesError", "NotFound", "Unavailable"]
