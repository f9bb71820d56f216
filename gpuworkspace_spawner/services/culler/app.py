"""``gpuworkspace-culler``: stops idle servers after staged warnings, keeping their disks.

Run by JupyterHub as a managed service, or anywhere with the environment a JupyterHub service gets
(``JUPYTERHUB_API_URL``, ``JUPYTERHUB_API_TOKEN``, ``JUPYTERHUB_SERVICE_URL``,
``JUPYTERHUB_SERVICE_PREFIX``). Configured with traitlets: ``gpuworkspace_culler_config.py``
(``c.CullerApp.idle_timeout = 7200``) and the command line (``--idle-timeout=7200``, or any
``--CullerApp.<trait>=...``); the command line wins. Durations are seconds.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from enum import Enum
from itertools import pairwise
from pathlib import Path
from typing import Any, cast

from jupyterhub.services.auth import HubAuth, HubOAuth
from traitlets import Any as AnyTrait
from traitlets import Bool, Dict, Float, Integer, List, Set, TraitError, Unicode, default, validate
from traitlets.config import Application

from ...catalog import CatalogSource
from ..serving import DEFAULT_MAX_BODY_BYTES, http_server, listen_address, log_as_a_service, until_stopped
from .cycle import SERVICE, ArbiterHook, Culler, Options
from .gpusource import GpuSource
from .hubapi import Http, HttpError, HubApi
from .model import GPU_MODES, Policy, ProfileSession
from .precedence import lead_time_warnings
from .probes import ServerProber
from .state import CullerState, CycleReport
from .web import make_app

log = logging.getLogger("gpuworkspace.culler")
DEFAULT_PORT = 10103
CONFIG_FILE = "gpuworkspace_culler_config.py"
DESCRIPTION = (__doc__ or "").split("\n\n")[0]
PROXY_URL_ENV = ("GPUWS_CULLER_PROXY_URL", "JUPYTERHUB_PUBLIC_HUB_URL", "JUPYTERHUB_PUBLIC_URL")


def _seconds(name: str, value: float) -> float:
    if value < 0:
        raise TraitError(f"CullerApp.{name} must be a duration in seconds >= 0, not {value!r}")
    return value


def _lead_times(name: str, value: Any) -> list[float]:
    leads = [float(v) for v in value]
    if any(v <= 0 for v in leads) or any(a <= b for a, b in pairwise(leads)):
        raise TraitError(f"CullerApp.{name} must be positive and descending, not {leads!r}")
    return leads


def load_hook(spec: Any) -> ArbiterHook | None:
    """A callable, or ``"module:function"`` imported; None or "" for none."""
    if spec is None or spec == "":
        return None
    if callable(spec):
        return cast(ArbiterHook, spec)
    module, _, attr = str(spec).partition(":")
    if not module or not attr:
        raise TraitError(f"CullerApp.arbiter_hook must be a callable or 'module:function', not {spec!r}")
    try:
        hook = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise TraitError(f"CullerApp.arbiter_hook {spec!r} cannot be imported: {e}") from e
    if not callable(hook):
        raise TraitError(f"CullerApp.arbiter_hook {spec!r} is not callable")
    return cast(ArbiterHook, hook)


class LeadTimes(List[float]):
    """``warn_before``: a list of seconds; on the command line ``none`` (alone) is the empty list."""

    def from_string_list(self, s_list: list[str]) -> Any:
        if [v.strip().lower() for v in s_list] == ["none"]:
            return []
        return super().from_string_list(s_list)


class CullerApp(Application):
    """The idle culler service."""

    name = SERVICE
    description = DESCRIPTION

    aliases = {  # noqa: RUF012 - traitlets reads these class attributes
        "interval": "CullerApp.interval",
        "idle-timeout": "CullerApp.idle_timeout",
        "max-duration": "CullerApp.max_duration",
        "job-handoff": "CullerApp.job_handoff",
        "warn-before": "CullerApp.warn_before",
        "concurrency": "CullerApp.concurrency",
        "cycles": "CullerApp.cycles",
        "proxy-url": "CullerApp.proxy_url",
        "attribution-url": "CullerApp.attribution_url",
        "config": "CullerApp.config_file",
        "catalog": "CullerApp.catalog",
        "listen": "CullerApp.listen",
        "max-body-bytes": "CullerApp.max_body_bytes",
        "log-level": "Application.log_level",
    }
    _catalog_source: CatalogSource | None = None  # follows the catalog's files once `catalog` is read
    flags = {  # noqa: RUF012
        "dry-run": ({"CullerApp": {"dry_run": True}}, "decide and report only: no warning, no stop"),
        "once": ({"CullerApp": {"once": True}}, "run one cycle, print a JSON summary, exit"),
        "save-first": ({"CullerApp": {"save_first": True}}, "checkpoint open notebooks before a stop"),
    }

    # --- the policy (model.Policy)
    idle_timeout = Float(3600.0, help="Seconds without activity of any kind before a stop; 0: never.").tag(
        config=True
    )
    idle_timeout_by_gpu_mode = Dict(
        value_trait=Float(),
        help=f"Idle timeout per GPU mode ({', '.join(GPU_MODES)}), e.g. {{'exclusive': 1800}}.",
    ).tag(config=True)
    idle_timeout_by_profile = Dict(
        value_trait=Float(),
        help="Idle timeout per profile slug; wins over the catalog's session.idleTimeout and the GPU "
        "mode's. Without it a profile gets the shorter of those two (docs/reference/culler.md).",
    ).tag(config=True)
    max_duration = Float(
        0.0, help="Longest session in seconds, busy or not (warned like an idle stop); 0: no limit."
    ).tag(config=True)
    max_duration_by_profile = Dict(
        value_trait=Float(),
        help="Longest session per profile slug; wins over the catalog's session.maxDuration.",
    ).tag(config=True)
    job_handoff = Unicode(
        "",
        help="A sentence added to the warnings of a max-duration stop and of a GPU workspace: where long "
        "runs go instead, e.g. the jobs service (the hub's config sets it when gpuworkspace-jobs runs). "
        "Empty: warnings say nothing about it.",
    ).tag(config=True)
    catalog = Unicode(
        "",
        help="The WorkspaceProfile catalog (file or directory). Each profile's session.idleTimeout, "
        "session.maxDuration and session.warnings (what its spawn card shows) apply unless "
        "idle_timeout_by_profile, max_duration_by_profile or warn_before_by_profile name the profile "
        "(an idle timeout: the shorter of the catalog's and the GPU mode's); re-read every cycle, a "
        "bad change keeps the last good.",
    ).tag(config=True)
    warn_before = LeadTimes(
        Float(),
        default_value=[1800.0, 300.0],
        help="Lead times of the staged warnings before a stop, descending (repeat --warn-before). "
        "[] (on the command line --warn-before=none): stop without warning. A lead time at least as "
        "long as an idle timeout is logged at start: warnings would begin right after activity.",
    ).tag(config=True)
    warn_before_by_profile = Dict(
        value_trait=List(Float()),
        help="Lead times per profile slug, e.g. {'gpu-shared': [600, 120]}; wins over the catalog's "
        "session.warnings, which win over warn_before. Positive and descending; [] for no warning.",
    ).tag(config=True)
    gpu_busy_percent = Float(10.0, help="A GPU utilisation sample at or above this percent is activity.").tag(
        config=True
    )
    cpu_busy_cores = Float(
        0.25,
        help="The workspace pod's CPU use (from the attribution service, as the kubelet measures it) at "
        "or above this many cores is activity: it keeps a process busy in a terminal that prints nothing. "
        "0: CPU use is never activity.",
    ).tag(config=True)
    exempt_users = Set(Unicode(), help="Users whose servers are never culled.").tag(config=True)
    exempt_groups = Set(Unicode(), help="Hub groups whose members' servers are never culled.").tag(
        config=True
    )
    exempt_profiles = Set(Unicode(), help="Profile slugs whose servers are never culled.").tag(config=True)

    # --- the loop
    interval = Float(300.0, help="Seconds from the start of one cycle to the next (never overlapping).").tag(
        config=True
    )
    concurrency = Integer(10, help="Single-user servers probed at the same time.").tag(config=True)
    timeout = Float(10.0, help="Seconds each HTTP request may take.").tag(config=True)
    dry_run = Bool(False, help="Decide and report only: give no warning, stop nothing.").tag(config=True)
    once = Bool(False, help="Run one cycle, print its report and decisions as JSON, exit.").tag(config=True)
    cycles = Integer(
        1, help="With --once: run this many cycles, `interval` seconds apart, print each report, exit."
    ).tag(config=True)
    save_first = Bool(
        False,
        help="Before a stop, checkpoint each notebook open in a session (api/sessions, then "
        "POST api/contents/<path>/checkpoints). Saves nothing the browser has not saved.",
    ).tag(config=True)
    remove = Bool(
        False,
        help="Stop named servers with remove=true, deleting their entry from the hub. "
        "The spawner still keeps the disk; off by default.",
    ).tag(config=True)
    arbiter_hook = AnyTrait(
        None,
        allow_none=True,
        help="Called as hook(workspace, decision) for every WARN and STOP (may be async): None keeps "
        "the decision, a Decision replaces it (Action.KEEP vetoes). A callable or 'module:function'. "
        "If it raises, the server is kept.",
    ).tag(config=True)

    # --- where things are
    proxy_url = Unicode(
        help="Origin of the proxy that serves /user/... (the hub's server URL path is appended); "
        f"default: ${', then $'.join(PROXY_URL_ENV)}. Empty: single-user servers are not probed.",
    ).tag(config=True)
    attribution_url = Unicode(
        help="Base URL of the GPU attribution service (its api/v1/workspaces); default "
        "$GPUWS_CULLER_ATTRIBUTION_URL. Empty: no GPU evidence.",
    ).tag(config=True)
    listen = Unicode(
        "",
        help=f"host:port to serve on (default: from JUPYTERHUB_SERVICE_URL, else 127.0.0.1:{DEFAULT_PORT}).",
    ).tag(config=True)
    max_body_bytes = Integer(
        help="Request bodies larger than this many bytes are refused with 413, unread (default 1 MiB; "
        "$GPUWS_MAX_BODY_BYTES).",
    ).tag(config=True)
    config_file = Unicode(CONFIG_FILE, help="The traitlets config file (missing is fine unless given).").tag(
        config=True
    )

    @default("proxy_url")
    def _default_proxy_url(self) -> str:
        return next((os.environ[k] for k in PROXY_URL_ENV if os.environ.get(k)), "")

    @default("max_body_bytes")
    def _default_max_body_bytes(self) -> int:
        return int(os.environ.get("GPUWS_MAX_BODY_BYTES") or DEFAULT_MAX_BODY_BYTES)

    @default("attribution_url")
    def _default_attribution_url(self) -> str:
        return os.environ.get("GPUWS_CULLER_ATTRIBUTION_URL", "")

    @validate("idle_timeout", "max_duration", "timeout")
    def _nonnegative(self, proposal: Any) -> float:
        return _seconds(proposal.trait.name, proposal.value)

    @validate("interval")
    def _interval(self, proposal: Any) -> float:
        if proposal.value <= 0:
            raise TraitError(f"CullerApp.interval must be > 0 seconds, not {proposal.value!r}")
        return float(proposal.value)

    @validate("idle_timeout_by_gpu_mode")
    def _by_gpu_mode(self, proposal: Any) -> dict[str, float]:
        unknown = sorted(set(proposal.value) - set(GPU_MODES))
        if unknown:
            raise TraitError(
                f"CullerApp.idle_timeout_by_gpu_mode: unknown GPU mode {unknown[0]!r}; one of {', '.join(GPU_MODES)}"
            )
        return {k: _seconds(f"idle_timeout_by_gpu_mode[{k!r}]", v) for k, v in proposal.value.items()}

    @validate("idle_timeout_by_profile", "max_duration_by_profile")
    def _by_profile(self, proposal: Any) -> dict[str, float]:
        name = proposal.trait.name
        return {k: _seconds(f"{name}[{k!r}]", v) for k, v in proposal.value.items()}

    @validate("warn_before")
    def _warn_before(self, proposal: Any) -> list[float]:
        return _lead_times("warn_before", proposal.value)

    @validate("warn_before_by_profile")
    def _warn_before_by_profile(self, proposal: Any) -> dict[str, list[float]]:
        return {k: _lead_times(f"warn_before_by_profile[{k!r}]", v) for k, v in proposal.value.items()}

    @validate("concurrency", "cycles")
    def _at_least_one(self, proposal: Any) -> int:
        if proposal.value < 1:
            raise TraitError(f"CullerApp.{proposal.trait.name} must be >= 1, not {proposal.value!r}")
        return int(proposal.value)

    @validate("gpu_busy_percent")
    def _percent(self, proposal: Any) -> float:
        if not 0 <= proposal.value <= 100:  # noqa: PLR2004 - a percentage
            raise TraitError(f"CullerApp.gpu_busy_percent must be within 0..100, not {proposal.value!r}")
        return float(proposal.value)

    @validate("cpu_busy_cores")
    def _cores(self, proposal: Any) -> float:
        if not 0 <= proposal.value < 1e6:  # noqa: PLR2004 - a CPU count
            raise TraitError(f"CullerApp.cpu_busy_cores must be >= 0, not {proposal.value!r}")
        return float(proposal.value)

    @validate("arbiter_hook")
    def _hook(self, proposal: Any) -> Any:
        load_hook(proposal.value)  # fail at start, naming the option
        return proposal.value

    def initialize(self, argv: Sequence[str] | None = None) -> None:
        self.parse_command_line(None if argv is None else list(argv))
        given = "config_file" in self.cli_config.get("CullerApp", {})
        path = Path(self.config_file)
        if path.is_file():
            self.load_config_file(path.name, path=str(path.parent.resolve()))
            self.update_config(self.cli_config)  # the command line wins over the file
        elif given:
            raise TraitError(f"CullerApp.config_file: no file {self.config_file!r}")

    def policy(self) -> Policy:
        return Policy(
            idle_timeout=self.idle_timeout,
            idle_timeout_by_gpu_mode=dict(self.idle_timeout_by_gpu_mode),
            idle_timeout_by_profile=dict(self.idle_timeout_by_profile),
            max_duration=self.max_duration,
            max_duration_by_profile=dict(self.max_duration_by_profile),
            warn_before=tuple(self.warn_before),
            warn_before_by_profile={k: tuple(v) for k, v in self.warn_before_by_profile.items()},
            catalog=self._catalog_sessions(),
            gpu_busy_percent=self.gpu_busy_percent,
            cpu_busy_cores=self.cpu_busy_cores,
            exempt_users=frozenset(self.exempt_users),
            exempt_groups=frozenset(self.exempt_groups),
            exempt_profiles=frozenset(self.exempt_profiles),
            handoff=self.job_handoff.strip(),
        )

    def _catalog_sessions(self) -> dict[str, ProfileSession]:
        """Per profile slug, the catalog's session section and GPU mode (empty without a catalog)."""
        if not self.catalog:
            return {}
        if self._catalog_source is None:
            self._catalog_source = CatalogSource(
                self.catalog, on_reload_error=lambda e: log.error("Invalid catalog change: %s", e)
            )
        return {
            p.slug: ProfileSession(
                idle_timeout=p.session.idle_timeout_s,
                max_duration=p.session.max_duration_s,
                warn_before=tuple(float(w) for w in p.session.warnings_s) or None,
                gpu_mode=p.placement.gpu_mode,
            )
            for p in self._catalog_source.current().profiles
        }

    def build(self, clock: Callable[[], datetime]) -> tuple[Culler, Http]:
        """The cycle and its HTTP client, from the traits and the service environment."""
        token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
        if not token:
            log.warning("JUPYTERHUB_API_TOKEN is not set: the hub will refuse every request")
        http = Http(token, timeout=self.timeout, max_clients=max(self.concurrency, 2) + 2)
        hub = HubApi(http, os.environ.get("JUPYTERHUB_API_URL") or "http://127.0.0.1:8081/hub/api")
        prober = ServerProber(http, self.proxy_url) if self.proxy_url else None
        if prober is None:
            log.warning("no proxy URL (--proxy-url, $GPUWS_CULLER_PROXY_URL): kernels and terminals unseen")
        gpu = GpuSource(http, self.attribution_url, started_at=clock()) if self.attribution_url else None
        options = Options(
            concurrency=self.concurrency,
            save_first=self.save_first,
            remove=self.remove,
            arbiter=load_hook(self.arbiter_hook),
        )
        state = CullerState(policy=self.policy(), dry_run=self.dry_run)
        for warning in lead_time_warnings(state.policy):
            log.warning("%s", warning)
        return Culler(state, hub, prober=prober, gpu=gpu, options=options, clock=clock), http

    async def run_once(self) -> int:
        """``cycles`` cycles (``interval`` apart), then the last one's summary with every report."""
        culler, http = self.build(lambda: datetime.now(UTC))
        loop = asyncio.get_running_loop()
        reports = []
        try:
            for n in range(self.cycles):
                began = loop.time()
                reports.append(_report(await culler.run()))
                if n + 1 < self.cycles:
                    await asyncio.sleep(max(0.0, self.interval - (loop.time() - began)))
        except HttpError as e:
            log.error("%s", e)
            return 1
        finally:
            http.close()
        print(json.dumps({**summary(culler.state), "cycles": reports}, indent=2, sort_keys=True))
        return 0

    async def serve(self) -> int:
        culler, http = self.build(lambda: datetime.now(UTC))
        # the instance HubOAuthCallbackHandler uses too: the OAuth state (PKCE verifier, next URL) is in it
        hub_auth = HubOAuth.instance() if os.environ.get("JUPYTERHUB_CLIENT_ID") else HubAuth()
        prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX") or f"/services/{SERVICE}/"
        host, port = listen_address(self.listen, DEFAULT_PORT)
        app = make_app(culler.state, hub_auth=hub_auth, prefix=prefix)
        server = http_server(app, max_body_bytes=self.max_body_bytes)
        server.listen(port, host)
        loop = asyncio.create_task(run_forever(culler, self.interval, self.policy))
        mode = " (dry run)" if self.dry_run else ""
        log.info("%s on http://%s:%s%s, every %ss%s", SERVICE, host, port, prefix, self.interval, mode)
        try:
            await until_stopped()
        finally:
            loop.cancel()
            server.stop()
            http.close()
        return 0

    def start(self) -> None:
        raise SystemExit(asyncio.run(self.run_once() if self.once else self.serve()))


async def run_forever(culler: Culler, interval: float, policy: Callable[[], Policy] | None = None) -> None:
    """A cycle every ``interval`` seconds from the start of the last; a slow cycle delays the next.
    ``policy`` is asked before each cycle (the catalog's session settings may have changed)."""
    loop = asyncio.get_running_loop()
    while True:
        began = loop.time()
        try:
            if policy is not None:
                culler.state.policy = policy()
            await culler.run()
        except HttpError as e:
            log.error("cycle skipped: %s", e)
        except Exception:
            log.exception("cycle failed")
        await asyncio.sleep(max(0.0, interval - (loop.time() - began)))


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _report(report: CycleReport) -> dict[str, Any]:
    return {**_plain(asdict(report)), "seconds": report.seconds}


def summary(state: CullerState) -> dict[str, Any]:
    """The last cycle's report and decisions, as ``--once`` prints them (with ``cycles``: each report)."""
    report = state.last_cycle
    return {
        "report": _report(report) if report else None,
        "decisions": [_plain(asdict(d)) for d in state.decisions.values()],
        "idle_gpu_seconds": {f"{u}/{s}": v for (u, s), v in state.idle_gpu_seconds.items()},
    }


def main(argv: Sequence[str] | None = None) -> int:
    log_as_a_service()
    app = CullerApp()
    try:
        app.initialize(argv)  # traitlets logs a bad value ("Bad config ...") and exits 1
    except TraitError as e:
        print(f"{SERVICE}: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:  # --help, or traitlets' exit on bad config
        return 2 if e.code else 0
    try:
        app.start()
    except SystemExit as e:
        return int(e.code or 0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
