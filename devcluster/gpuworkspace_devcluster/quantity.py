"""Kubernetes resource quantities ("100Mi", "1.5", "250m", "2Gi", "1e3") as exact Decimals."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_SUFFIXES = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_RE = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)$")


class QuantityError(ValueError):
    pass


def parse_quantity(value: str | int | float) -> Decimal:
    """``"2Gi"`` → ``Decimal(2147483648)``; raises :class:`QuantityError` with the real wording."""
    if isinstance(value, bool):
        raise QuantityError(
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        )
    if isinstance(value, int | float):
        return Decimal(str(value))
    match = _RE.match(value.strip())
    if not match:
        raise QuantityError(
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        )
    try:
        return Decimal(match.group(1)) * _SUFFIXES[match.group(2)]
    except InvalidOperation as exc:
        raise QuantityError(f"unable to parse quantity's suffix in {value!r}") from exc
