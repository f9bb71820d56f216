"""``gpuworkspace-culler``'s HTTP surface: the status page and a JSON API, read-only views of the state.

Routes under the service prefix: the status page (``""``), ``api/v1/decisions[?action=warn,stop]``,
``api/v1/notices`` (the caller's own active warnings, which the hub's home page shows as a banner),
``api/v1/status`` and, with HubOAuth, ``oauth_callback``. Nothing here writes the
:class:`.CullerState`: the cycle is its only writer.

Who sees what comes from the hub's model of the caller's token, as in the attribution and disk
services (:mod:`..access`): an unfiltered ``admin:servers`` or ``read:servers`` scope sees every
workspace; any other caller sees the workspaces of the users it may read (``read:servers!user=<name>``,
or the user's own login to this service by OAuth). Errors are JSON ``{"status", "message"}`` like
JupyterHub's own API (:class:`..serving.JsonErrors`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from jinja2 import Environment
from jupyterhub.utils import url_path_join
from tornado import web

from ..access import (
    may_read,
    may_use_service,
    reads_every_server,
    who,
)
from ..handling import ServiceHandler, page_templates, service_app
from ..serving import ServiceError, hub_prefix
from .model import Action, Decision, Effective, Policy, Warning
from .state import CullerState, CycleReport, Key

SERVICE = "gpuworkspace-culler"  # cycle.SERVICE; not imported: the web layer reads only the state
RECENT_STOPS = 50  # rows of "recently stopped" on the page
_FAR = datetime.max.replace(tzinfo=UTC)
_MINUTE, _HOUR = 60, 3600

Json = dict[str, Any]


# ------------------------------------------------------------------------------------- who sees what
@dataclass(frozen=True)
class Viewer:
    """The caller and what it may see (from the hub's model of its token)."""

    model: Mapping[str, Any]
    service: str

    @property
    def name(self) -> str | None:
        """The user the token belongs to; None for a service's token."""
        kind, name = self.model.get("kind", "user"), self.model.get("name")
        return str(name) if kind == "user" and name else None

    @property
    def everyone(self) -> bool:
        """An unfiltered ``admin:servers`` or ``read:servers``: every workspace."""
        return reads_every_server(self.model)

    def may_see(self, user: str) -> bool:
        return self.everyone or may_read(self.model, user, service=self.service)

    def may_open_page(self) -> bool:
        """This service's OAuth login, or a token that may read the caller's own servers or everyone's."""
        if may_use_service(self.model, self.service) or self.everyone:
            return True
        return self.name is not None and may_read(self.model, self.name, service=self.service)


# ------------------------------------------------------------------------------------ JSON (pure)
def iso(at: datetime | None) -> str | None:
    """ISO 8601 in UTC with a ``Z``, as the hub's API writes times."""
    return None if at is None else at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def warning_json(warning: Warning) -> Json:
    return {
        "stage": warning.stage,
        "reason": str(warning.reason),
        "given_at": iso(warning.given_at),
        "stop_at": iso(warning.stop_at),
    }


def effective_json(rules: Effective | None) -> Json | None:
    """The rules applied to one server, each value with where it came from (``precedence``)."""
    if rules is None:
        return None
    return {
        "idle_timeout": {"seconds": rules.idle_timeout, "source": str(rules.idle_timeout_source)},
        "max_duration": {"seconds": rules.max_duration, "source": str(rules.max_duration_source)},
        "warn_before": {"seconds": list(rules.warn_before), "source": str(rules.warn_before_source)},
    }


def stages_of(state: CullerState, key: Key) -> int:
    """How many warning stages the server gets: its own lead times, else the default's."""
    decision = state.decisions.get(key)
    rules = decision.policy if decision is not None else None
    return len((rules or state.policy).warn_before)


def decision_json(decision: Decision, warnings: Sequence[Warning], idle_gpu_seconds: float | None) -> Json:
    return {
        "user": decision.user,
        "server": decision.server,
        "action": str(decision.action),
        "reason": None if decision.reason is None else str(decision.reason),
        "message": decision.message,
        "stage": decision.stage,
        "stop_at": iso(decision.stop_at),
        "last_activity": iso(decision.last_activity),
        "activity_source": decision.activity_source,
        "warnings": [warning_json(w) for w in warnings],
        "idle_allocated_gpu_seconds": idle_gpu_seconds,
        "policy": effective_json(decision.policy),
    }


def parse_actions(text: str) -> frozenset[Action] | None:
    """``?action=warn,stop`` -> those actions; empty -> None (all). Unknown names are a 400."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    known = {str(a): a for a in Action}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ServiceError(400, f"unknown action {', '.join(unknown)}; one or more of {', '.join(known)}")
    return frozenset(known[n] for n in names) or None


def _soonest(decision: Decision) -> tuple[datetime, str, str]:
    return (decision.stop_at or _FAR, decision.user, decision.server)


def visible_decisions(state: CullerState, viewer: Viewer) -> list[Decision]:
    """The last cycle's decisions the caller may see, soonest stop first."""
    return sorted((d for d in state.decisions.values() if viewer.may_see(d.user)), key=_soonest)


def decisions_json(
    state: CullerState, viewer: Viewer, actions: frozenset[Action] | None = None
) -> list[Json]:
    return [
        decision_json(d, state.book.given(d.key), state.idle_gpu_seconds.get(d.key))
        for d in visible_decisions(state, viewer)
        if actions is None or d.action in actions
    ]


def notices_json(state: CullerState, user: str) -> list[Json]:
    """``user``'s active warnings, one per server: the latest stage given and when the stop comes.

    The stop time is the current decision's when it is still for the same reason (a late cycle only
    moves it later), else the one the warning announced.
    """
    notices = []
    for server, given in sorted(state.book.of_user(user).items()):
        latest = given[-1]
        decision = state.decisions.get((user, server))
        if decision is not None and (decision.cancels_warnings or decision.action is Action.EXEMPT):
            continue  # withdrawn this cycle; the book forgets them when the cycle clears it
        stop_at = latest.stop_at
        if decision is not None and decision.reason is latest.reason and decision.stop_at is not None:
            stop_at = decision.stop_at
        notices.append(
            {
                "server": server,
                "reason": str(latest.reason),
                "stage": latest.stage,
                "stages": stages_of(state, (user, server)),
                "stop_at": iso(stop_at),
                "message": decision.message if decision else "",
                # the evidence alone ("idle since ... (latest: kernel k1)"), without the policy's
                # "; stops at ..." which the banner says in the browser's time zone
                "evidence": decision.message.partition("; ")[0] if decision else "",
                "last_activity": iso(decision.last_activity) if decision else None,
                "activity_source": decision.activity_source if decision else None,
                "dry_run": state.dry_run,
                # the warning offers the jobs hand-off (the culler's --job-handoff applies to it):
                # JupyterLab shows a "Run as a job" action where the user may submit jobs
                "handoff": decision.handoff if decision else False,
            }
        )
    return notices


def _owner(error: str) -> str:
    """The user an error line names ("alice/gpu: probe failed: ..." -> "alice")."""
    return error.partition(":")[0].partition("/")[0]


def cycle_json(report: CycleReport | None, viewer: Viewer) -> Json | None:
    """The last cycle; its error lines only where they name a workspace the caller may see."""
    if report is None:
        return None
    errors = [e for e in report.errors if viewer.everyone or viewer.may_see(_owner(e))]
    return {
        "started_at": iso(report.started_at),
        "finished_at": iso(report.finished_at),
        "seconds": round(report.seconds, 3),
        "servers": report.servers,
        "probed": report.probed,
        "requests": report.requests,
        "warned": report.warned,
        "stopped": report.stopped,
        "dry_run": report.dry_run,
        "errors": errors,
        "error_count": len(report.errors),
    }


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(value[k]) for k in sorted(value)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, frozenset | set):
        return sorted(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def policy_json(policy: Policy, viewer: Viewer) -> Json:
    """Every field of the effective policy; other users' exemptions only for those who may see them."""
    body = {f.name: _plain(getattr(policy, f.name)) for f in dataclasses.fields(policy)}
    body["exempt_users"] = [u for u in body["exempt_users"] if viewer.may_see(u)]
    return body


def status_json(state: CullerState, viewer: Viewer) -> Json:
    return {
        "dry_run": state.dry_run,
        "last_cycle": cycle_json(state.last_cycle, viewer),
        "policy": policy_json(state.policy, viewer),
    }


# ---------------------------------------------------------------------------------- the page (pure)
def label(user: str, server: str) -> str:
    return f"{user}/{server}" if server else f"{user} (default server)"


def until(at: datetime | None, now: datetime) -> str:
    """``in 25 min``, ``in 2 h 5 min``, ``due now``; empty without a time."""
    if at is None:
        return ""
    seconds = (at - now).total_seconds()
    if seconds <= 0:
        return "due now"
    minutes = round(seconds / _MINUTE)
    if seconds < _HOUR:
        return f"in {max(minutes, 1)} min"
    return f"in {minutes // 60} h {minutes % 60} min"


def stamp(at: datetime | None) -> str:
    return "" if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def gpu_time(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    if seconds >= _HOUR:
        return f"{seconds / _HOUR:.2f} GPU·h"
    return f"{seconds / _MINUTE:.0f} GPU·min"


def _visible(keys: Iterable[Key], viewer: Viewer) -> list[Key]:
    return sorted(k for k in keys if viewer.may_see(k[0]))


def page_context(
    state: CullerState, viewer: Viewer, *, now: datetime, prefix: str, hub_prefix: str
) -> dict[str, Any]:
    """Everything templates/culler/page.html shows, filtered for the caller."""
    upcoming = [d for d in state.upcoming() if viewer.may_see(d.user)]
    warned = {k: w for k, w in state.book.all().items() if w and viewer.may_see(k[0])}
    stopped = [(at, d) for at, d in reversed(state.stopped) if viewer.may_see(d.user)][:RECENT_STOPS]
    idle_gpu = sorted(
        ((k, s) for k, s in state.idle_gpu_seconds.items() if viewer.may_see(k[0])),
        key=lambda pair: (-pair[1], pair[0]),
    )
    return {
        "prefix": prefix,
        "hub_prefix": hub_prefix,
        "user": viewer.name or who(viewer.model),
        "everyone": viewer.everyone,
        "now": now,
        "dry_run": state.dry_run,
        "cycle": cycle_json(state.last_cycle, viewer),
        "report": state.last_cycle,
        "policy": state.policy,
        "upcoming": upcoming,
        "warned": [(k, warned[k]) for k in _visible(warned, viewer)],
        "stopped": stopped,
        "idle_gpu": idle_gpu,
        "idle_gpu_of": dict(idle_gpu),
        "given": state.book.given,
        "stages": lambda key: stages_of(state, key),
        "label": label,
        "until": until,
        "stamp": stamp,
        "iso": iso,
        "gpu_time": gpu_time,
    }


def environment() -> Environment:
    """Jinja for templates/culler/ (the kit's, as the attribution dashboard's)."""
    return page_templates("culler")


# ------------------------------------------------------------------------------------------ handlers
@dataclass(frozen=True)
class Site:
    """What every handler shares."""

    state: CullerState
    hub_auth: Any
    prefix: str
    service: str
    hub_prefix: str
    templates: Environment
    clock: Callable[[], datetime]


class Base(ServiceHandler):
    """The kit's caller, access and errors (:class:`..handling.ServiceHandler`); the caller as a :class:`Viewer`."""

    no_credentials = (
        "missing or invalid credentials: log in to the hub, or send 'Authorization: token <hub token>'"
    )
    viewer: Viewer

    def initialize(self, site: Site) -> None:
        self.site = site
        self.hub_auth = site.hub_auth

    @property
    def service_name(self) -> str:
        return self.site.service

    async def identify(self) -> bool:
        if not await super().identify():
            return False
        self.viewer = Viewer(self.caller, self.site.service)
        return True


class ApiHandler(Base):
    """JSON API (the kit's defaults)."""


class DecisionsHandler(ApiHandler):
    def get(self) -> None:
        actions = parse_actions(self.get_argument("action", ""))
        self.reply(decisions_json(self.site.state, self.viewer, actions))


class NoticesHandler(ApiHandler):
    browser_login = True  # the home page's script fetches this with the user's hub login

    def check_xsrf_cookie(self) -> None:
        """No xsrf token for this read-only GET of the caller's own notices: the hub's home page fetches
        it, and cannot read this service's xsrf cookie (it is scoped to the service's path), so
        JupyterHub's check would refuse the login cookie and send the fetch round the OAuth login
        forever. Other sites cannot read the answer (no CORS headers), and it changes nothing."""

    def get(self) -> None:
        me = self.viewer.name
        if me is None:
            raise ServiceError(400, f"notices are a user's own: {who(self.viewer.model)} is not a user")
        if not self.viewer.may_see(me):
            raise ServiceError(
                403,
                f"{me}'s token has neither read:servers!user={me} nor access:services!service={self.site.service}",
            )
        self.reply(notices_json(self.site.state, me))


class StatusHandler(ApiHandler):
    def get(self) -> None:
        self.reply(status_json(self.site.state, self.viewer))


class PageHandler(Base):
    """The status page (HTML); errors as plain text."""

    browser_login = True
    answers_json = False

    async def prepare(self) -> None:
        await super().prepare()
        if not self._finished and not self.viewer.may_open_page():
            raise ServiceError(
                403, f"{who(self.viewer.model)} lacks access:services!service={self.site.service}"
            )

    def get(self) -> None:
        site = self.site
        ctx = page_context(
            site.state, self.viewer, now=site.clock(), prefix=site.prefix, hub_prefix=site.hub_prefix
        )
        self.set_header("Cache-Control", "no-store")
        self.finish(site.templates.get_template("page.html").render(**ctx))


def _service_name(prefix: str) -> str:
    """``/services/<name>/`` -> ``<name>`` (the name the access:services scope carries)."""
    parts = [p for p in prefix.split("/") if p]
    return parts[-1] if len(parts) >= 2 and parts[-2] == "services" else SERVICE  # noqa: PLR2004


def make_app(
    state: CullerState,
    *,
    hub_auth: Any,
    prefix: str,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> web.Application:
    """The service's tornado application; ``hub_auth`` is a HubAuth (tokens) or HubOAuth (browsers too)."""
    site = Site(
        state=state,
        hub_auth=hub_auth,
        prefix=prefix,
        service=_service_name(prefix),
        hub_prefix=hub_prefix(hub_auth),
        templates=environment(),
        clock=clock,
    )
    api = url_path_join(prefix, "api/v1")
    common = {"site": site}
    routes: list[Any] = [
        (prefix, PageHandler, common),
        (url_path_join(api, "decisions"), DecisionsHandler, common),
        (url_path_join(api, "notices"), NoticesHandler, common),
        (url_path_join(api, "status"), StatusHandler, common),
    ]
    return service_app(routes, hub_auth=hub_auth, prefix=prefix)
