"""What can go wrong with a catalog (for operators) and with a user's choice of profile (for users)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

OptionsReason = Literal["malformed-options", "unknown-profile", "forbidden-profile", "unknown-option"]


@dataclass(frozen=True, order=True)
class CatalogProblem:
    """One thing wrong with a catalog, located as precisely as we can.

    ``field`` is a dotted path into the YAML document (``spec.resources.limits.memory``, list items as
    ``spec.storage.teamDirectories[0].mountPath``); empty when the problem is about the file itself.
    """

    file: str
    profile: str | None
    field: str
    message: str

    def __str__(self) -> str:
        parts = [self.file or "<catalog>"]
        if self.profile is not None:
            parts.append(f'profile "{self.profile}"')
        if self.field:
            parts.append(self.field)
        parts.append(self.message)
        return ": ".join(parts)


class CatalogError(Exception):
    """The catalog is not valid; ``problems`` lists everything found, not just the first."""

    def __init__(self, problems: Iterable[CatalogProblem]) -> None:
        self.problems: tuple[CatalogProblem, ...] = tuple(problems)
        super().__init__(self._render())

    def _render(self) -> str:
        count = len(self.problems)
        noun = "problem" if count == 1 else "problems"
        lines = [f"invalid workspace catalog: {count} {noun}"]
        lines.extend(f"  {problem}" for problem in self.problems)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self._render()


class OptionsError(ValueError):
    """A user's server options were refused; ``message`` is written for the user, ``reason`` for machines."""

    def __init__(self, message: str, reason: OptionsReason) -> None:
        super().__init__(message)
        self.message = message
        self.reason: OptionsReason = reason

    def __str__(self) -> str:
        return self.message
