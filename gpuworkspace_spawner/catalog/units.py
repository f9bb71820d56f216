"""Durations, Kubernetes quantities and image references: parsing, formatting and their patterns."""

from __future__ import annotations

import re
from decimal import Decimal

# "90m", "12h", "1h30m", "45s", "2d": units largest first, each at most once, at least one.
DURATION_PATTERN = r"^(?=[0-9])(?:[0-9]{1,6}d)?(?:[0-9]{1,6}h)?(?:[0-9]{1,6}m)?(?:[0-9]{1,6}s)?$"
_DURATION_RE = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_UNIT_SECONDS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
_FORMAT_UNITS = (("d", 86400, 10**9), ("h", 3600, 48), ("min", 60, 120), ("s", 1, 120))

# Kubernetes resource.Quantity, unsigned (a workspace never asks for a negative amount).
QUANTITY_PATTERN = (
    r"^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_QUANTITY_RE = re.compile(
    r"^(?P<number>([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(?P<suffix>([KMGTPE]i)|[numkMGTPE]|([eE][+-]?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
MIG_RESOURCE_PATTERN = r"^nvidia\.com/mig-[0-9]+(c\.[0-9]+)?g\.[0-9]+gb(\.[a-z0-9]+)*$"
GPU_RESOURCE = "nvidia.com/gpu"
SHARED_GPU_RESOURCE = "nvidia.com/gpu.shared"

# An OCI image reference: [registry[:port]/]path[:tag][@sha256:digest]
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
# A first component is a registry only if it has a '.' or a port or is localhost (as docker decides).
_HOST = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_REGISTRY = rf"(?:(?:localhost|{_HOST}(?:\.{_HOST})+)(?::[0-9]+)?/|{_HOST}:[0-9]+/)"
_REPOSITORY = rf"{_REGISTRY}?{_COMPONENT}(?:/{_COMPONENT})*"
IMAGE_REFERENCE_RE = re.compile(rf"^{_REPOSITORY}(?::[\w][\w.-]{{0,127}})?(?:@sha256:[0-9a-f]{{64}})?$")
IMAGE_DIGEST_RE = re.compile(rf"^{_REPOSITORY}(?::[\w][\w.-]{{0,127}})?@sha256:[0-9a-f]{{64}}$")


def parse_duration(text: str) -> int:
    """``"1h30m"`` → 5400. Raises ValueError for anything that is not a positive duration."""
    match = _DURATION_RE.fullmatch(text)
    if not text or match is None:
        raise ValueError(f"{text!r} is not a duration like 90m, 12h, 1h30m, 45s or 2d")
    seconds = sum(
        int(part) * unit for part, (_, unit) in zip(match.groups(), _UNIT_SECONDS, strict=True) if part
    )
    if seconds <= 0:
        raise ValueError(f"{text!r} is zero; a duration must be positive")
    return seconds


def format_duration(seconds: int) -> str:
    """Seconds in the words a user reads: 5400 → ``"90 min"``, 43200 → ``"12 h"``, 9000 → ``"2 h 30 min"``.

    One unit when it is exact and the number stays small (under 120 min, 48 h, 120 s), else a
    compound of days, hours, minutes and seconds.
    """
    if seconds < 0:
        raise ValueError(f"negative duration: {seconds}")
    if seconds == 0:
        return "0 s"
    for name, unit, below in _FORMAT_UNITS:
        if seconds % unit == 0 and seconds // unit < below:
            return f"{seconds // unit} {name}"
    parts = []
    remaining = seconds
    for name, unit, _ in _FORMAT_UNITS:
        count, remaining = divmod(remaining, unit)
        if count:
            parts.append(f"{count} {name}")
    return " ".join(parts)


def parse_quantity(text: str) -> Decimal:
    """A Kubernetes quantity as an exact number: ``"64Gi"`` → 68719476736, ``"500m"`` → 0.5."""
    match = _QUANTITY_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a Kubernetes quantity (like 500m, 4, 64Gi)")
    try:
        number = Decimal(match["number"])
        suffix = match["suffix"] or ""
        if suffix in _BINARY:
            return number * (Decimal(1024) ** _BINARY[suffix])
        if suffix in _DECIMAL:
            return number.scaleb(_DECIMAL[suffix])
        return number.scaleb(int(suffix[1:]))
    except (ArithmeticError, ValueError) as exc:  # absurd exponents
        raise ValueError(f"{text!r} is out of range for a Kubernetes quantity") from exc


def is_gpu_resource(name: str) -> bool:
    return name.startswith("nvidia.com/")


def is_extended_resource(name: str) -> bool:
    """Kubernetes' own rule: a resource name with a domain that is not kubernetes.io is extended."""
    return "/" in name and not name.split("/", 1)[0].endswith("kubernetes.io")
