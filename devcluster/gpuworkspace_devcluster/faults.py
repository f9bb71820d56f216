"""Seeded, reproducible fault injection for the devcluster API server.

Rules match requests by ``verb``, ``resource``, ``namespace`` and the client's ``user_agent``
(``fnmatch`` patterns; ``*`` also matches cluster-scoped requests; a user-agent pattern aims faults at
one client, e.g. ``OpenAPI-Generator*`` for kubernetes_asyncio, not kubectl) and inject errors, latency or watch disruptions. Every random draw
comes from one ``random.Random(seed)``, so the same seed, rules and request sequence give the same
faults. A rule with ``count`` applies at most that many times (each request or watch it changes).
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, fields
from fnmatch import fnmatchcase
from typing import Any

from .errors import ApiError

SUPPORTED_CODES = (429, 500, 503, 504)
_MAX_WATCH_EVENTS = 1_000_000


@dataclass
class FaultRule:
    verb: str = "*"
    resource: str = "*"  # plural, or "plural/subresource" (e.g. "pods/log")
    namespace: str = "*"
    user_agent: str = "*"  # the request's User-Agent header
    error_rate: float = 0.0  # chance that a matching request fails with one of status_codes
    status_codes: tuple[int, ...] = (500, 429, 504)
    latency_s: float = 0.0  # added before a matching request is answered
    watch_drop_after_events: int | None = None  # end matching watches after this many events
    watch_drop_rate: float = 0.0  # chance, after each event, that a matching watch is cut
    watch_stall_s: float = 0.0  # pause before a matching watch sends anything
    count: int | None = None  # apply at most this many times

    def __post_init__(self) -> None:
        for key in ("verb", "resource", "namespace", "user_agent"):
            if not isinstance(getattr(self, key), str) or not getattr(self, key):
                raise ValueError(f"fault rule {key!r} must be a non-empty string pattern")
        for key in ("error_rate", "watch_drop_rate"):
            value = getattr(self, key)
            if not _is_number(value) or not 0.0 <= value <= 1.0:
                raise ValueError(f"fault rule {key!r} must be a number in [0, 1], got {value!r}")
        for key in ("latency_s", "watch_stall_s"):
            value = getattr(self, key)
            if not _is_number(value) or not 0.0 <= value < math.inf:
                raise ValueError(f"fault rule {key!r} must be a finite number >= 0, got {value!r}")
        codes = self.status_codes
        if isinstance(codes, list):
            self.status_codes = codes = tuple(codes)
        if not isinstance(codes, tuple) or not codes or any(c not in SUPPORTED_CODES for c in codes):
            supported = ", ".join(map(str, SUPPORTED_CODES))
            raise ValueError(
                f"fault rule 'status_codes' must be a non-empty list of {supported}; got {codes!r}"
            )
        for key, low in (("watch_drop_after_events", 0), ("count", 1)):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < low):
                raise ValueError(f"fault rule {key!r} must be null or an integer >= {low}, got {value!r}")

    def matches(self, verb: str, resource: str, namespace: str | None, user_agent: str = "") -> bool:
        return (
            fnmatchcase(verb, self.verb)
            and fnmatchcase(resource, self.resource)
            and fnmatchcase(namespace or "", self.namespace)
            and fnmatchcase(user_agent, self.user_agent)
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status_codes"] = list(self.status_codes)
        return data

    @classmethod
    def from_dict(cls, data: Any) -> FaultRule:
        """A rule from its JSON form; ValueError naming unknown keys or bad values."""
        if not isinstance(data, dict):
            raise ValueError(f"a fault rule must be a JSON object, got {type(data).__name__}")
        allowed = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(allowed))
        if unknown:
            raise ValueError(f"unknown fault rule key(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}")
        return cls(**data)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value)


@dataclass(frozen=True)
class FaultDecision:
    error: ApiError | None = None
    latency_s: float = 0.0


@dataclass(frozen=True)
class WatchFault:
    drop_after_events: int | None = None  # close the stream after sending this many events
    stall_s: float = 0.0  # wait this long before sending anything


def injected_error(code: int) -> ApiError:
    """The Status the real API server sends for ``code``, marked as injected."""
    if code == 429:  # noqa: PLR2004
        return ApiError(429, "TooManyRequests", "Too many requests, please try again later.", retry_after=1)
    if code == 500:  # noqa: PLR2004
        causes = [{"message": "injected fault"}]
        return ApiError(
            500, "InternalError", "Internal error occurred: injected fault", details={"causes": causes}
        )
    if code == 503:  # noqa: PLR2004
        return ApiError(503, "ServiceUnavailable", "the server is currently unable to handle the request")
    if code == 504:  # noqa: PLR2004
        message = "Timeout: request did not complete within requested timeout - injected fault"
        return ApiError(504, "Timeout", message)
    raise ValueError(f"unsupported fault status code {code}; supported: {SUPPORTED_CODES}")


class FaultInjector:
    """Holds fault rules and decides, reproducibly for a seed, which requests they hit."""

    def __init__(self, seed: int = 0) -> None:
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError(f"fault injector 'seed' must be an integer, got {seed!r}")
        self.seed = seed
        self._rng = random.Random(seed)
        self._rules: dict[int, FaultRule] = {}
        self._remaining: dict[int, int | None] = {}
        self._next_id = 1

    def add(self, rule: FaultRule, *, rule_id: int | None = None) -> int:
        """Add ``rule`` (checked after earlier rules); returns its id."""
        rule_id = self._next_id if rule_id is None else rule_id
        if rule_id in self._rules:
            raise ValueError(f"fault rule id {rule_id} already exists")
        self._rules[rule_id], self._remaining[rule_id] = rule, rule.count
        self._next_id = max(self._next_id, rule_id + 1)
        return rule_id

    def remove(self, rule_id: int) -> None:
        """Remove a rule; KeyError if there is none with that id."""
        if rule_id not in self._rules:
            raise KeyError(f"no fault rule with id {rule_id}")
        del self._rules[rule_id], self._remaining[rule_id]

    def clear(self) -> None:
        self._rules.clear()
        self._remaining.clear()

    def rules(self) -> dict[int, FaultRule]:
        return dict(self._rules)

    def remaining(self, rule_id: int) -> int | None:
        """How many more times a rule may apply (None: unlimited)."""
        return self._remaining[rule_id]

    def reseed(self, seed: int | None = None) -> None:
        """Restart the random sequence (from ``seed`` when given)."""
        self.seed = self.seed if seed is None else seed
        self._rng = random.Random(self.seed)

    def _active(
        self, verb: str, resource: str, namespace: str | None, user_agent: str
    ) -> list[tuple[int, FaultRule]]:
        return [
            (rid, rule)
            for rid, rule in self._rules.items()
            if self._remaining[rid] != 0 and rule.matches(verb, resource, namespace, user_agent)
        ]

    def _used(self, rule_id: int) -> None:
        left = self._remaining[rule_id]
        if left is not None:
            self._remaining[rule_id] = left - 1

    def decide(
        self, verb: str, resource: str, namespace: str | None = None, user_agent: str = ""
    ) -> FaultDecision:
        """Error and latency for one request; the first matching rule that fires an error wins."""
        error: ApiError | None = None
        latency = 0.0
        for rid, rule in self._active(verb, resource, namespace, user_agent):
            fired = False
            if error is None and rule.error_rate > 0 and self._rng.random() < rule.error_rate:
                error, fired = injected_error(self._rng.choice(rule.status_codes)), True
            if rule.latency_s > 0:
                latency, fired = latency + rule.latency_s, True
            if fired:
                self._used(rid)
        return FaultDecision(error, latency)

    def decide_watch(self, resource: str, namespace: str | None = None, user_agent: str = "") -> WatchFault:
        """How a new watch on ``resource`` is disrupted: cut after N events and/or stalled at start."""
        drop: int | None = None
        stall = 0.0
        for rid, rule in self._active("watch", resource, namespace, user_agent):
            candidates = [] if rule.watch_drop_after_events is None else [rule.watch_drop_after_events]
            if rule.watch_drop_rate > 0:  # events delivered before a per-event cut: geometric draw
                p, u = rule.watch_drop_rate, self._rng.random()
                n = math.ceil(math.log1p(-u) / math.log1p(-p)) if p < 1 else 1
                candidates.append(min(max(n, 1), _MAX_WATCH_EVENTS))
            if candidates:
                drop = min(candidates if drop is None else [drop, *candidates])
            stall = max(stall, rule.watch_stall_s)
            if candidates or rule.watch_stall_s > 0:
                self._used(rid)
        return WatchFault(drop, stall)

    def to_json(self) -> dict[str, Any]:
        """``{"seed": ..., "rules": [{"id": ..., "remaining": ..., <rule fields>}]}`` for the admin API."""
        rules = [
            {"id": rid, "remaining": self._remaining[rid], **rule.to_dict()}
            for rid, rule in self._rules.items()
        ]
        return {"seed": self.seed, "rules": rules}

    @classmethod
    def from_json(cls, data: Any) -> FaultInjector:
        """Inverse of :meth:`to_json` (``id``/``remaining`` optional); ValueError on bad input."""
        if not isinstance(data, dict):
            raise ValueError(f"fault configuration must be a JSON object, got {type(data).__name__}")
        unknown = sorted(set(data) - {"seed", "rules"})
        if unknown:
            raise ValueError(f"unknown fault configuration key(s) {', '.join(unknown)}; allowed: seed, rules")
        rules = data.get("rules", [])
        if not isinstance(rules, list):
            raise ValueError("fault configuration 'rules' must be a list")
        injector = cls(data.get("seed", 0))
        for index, raw in enumerate(rules):
            entry = dict(raw) if isinstance(raw, dict) else raw
            rule_id = entry.pop("id", None) if isinstance(entry, dict) else None
            remaining = entry.pop("remaining", "unset") if isinstance(entry, dict) else "unset"
            try:
                rule = FaultRule.from_dict(entry)
                if rule_id is not None and (
                    not isinstance(rule_id, int) or isinstance(rule_id, bool) or rule_id < 1
                ):
                    raise ValueError(f"'id' must be a positive integer, got {rule_id!r}")
                rid = injector.add(rule, rule_id=rule_id)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"rules[{index}]: {exc}") from exc
            if remaining != "unset":
                if remaining is not None and (not isinstance(remaining, int) or remaining < 0):
                    raise ValueError(f"rules[{index}]: 'remaining' must be null or an integer >= 0")
                injector._remaining[rid] = remaining
        return injector
