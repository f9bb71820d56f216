"""GPUWorkspaceSpawner: KubeSpawner with a profile catalog, a retained home disk and honest progress.

Orchestration only: the catalog decides what a user may start; a runtime (``runtimes``: container or
VM, from the profile at a start, else from the hub state) ensures the disk and runs the compute with the
I/O the spawner lends it (``spawnerports``). State lives on the cluster; the hub state keeps names.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any, ClassVar

from kubespawner import KubeSpawner
from prometheus_client import Counter
from sqlalchemy.orm import object_session
from traitlets import Enum, Float, Integer, Unicode, default

from .audit import Action
from .catalog import (
    Catalog,
    CatalogError,
    CatalogSource,
    OptionsError,
    Selection,
    build_profile_list,
    resolve_user_options,
)
from .catalog.options import decide_team
from .compat import SpawnException
from .k8s import gateway
from .k8s.errors import as_kubernetes_error, is_unavailable
from .k8s.reflectors import retrying
from .lifecycle.diskpolicy import decide_retention
from .lifecycle.healing import with_last_failure
from .lifecycle.state import to_json
from .limiting import form_refusals
from .manifests.conventions import apply_conventions, workspace_env
from .manifests.names import WorkspaceContext, WorkspaceIdentity, owner_key
from .manifests.pod import build_workspace_pod
from .probecredentials import STATE_KEY as PROBE_STATE_KEY
from .probecredentials import issue_server_probe_token, probe_token_from_state, revoke_server_probe_tokens
from .progresslog import ProgressLog
from .runtimes import Runtime, RuntimeContext, choose_evicted, choose_runtime
from .runtimes.container import ContainerRuntime
from .selfhealing import FAILURE_KEY, SelfHealing
from .spawnerports import SpawnerPorts

CATALOG_RELOAD_FAILURES = Counter(
    "gpuworkspace_catalog_reload_failures_total",
    "Catalog reloads that failed validation (the hub kept serving the last good catalog)",
)
DEFAULT_URLS = {"jupyterlab": "/lab", "code-server": "/vscode/"}
_STATUS = {"forbidden-profile": 403}
log = logging.getLogger("gpuworkspace.catalog")


class GPUWorkspaceSpawner(SelfHealing, KubeSpawner):
    """Spawns catalog-defined GPU workspaces whose home disk outlives every stop and server deletion."""

    catalog_path = Unicode(
        "",
        help="""
        The WorkspaceProfile catalog: one YAML file or a directory of them (a ConfigMap mount in Helm).

        Validated when first read; an invalid catalog raises and the hub refuses to start when the
        config calls :func:`gpuworkspace_spawner.load_catalog_or_exit`. A changed catalog is reloaded on
        the next read; an invalid change keeps the last good catalog, is logged and counted in
        ``gpuworkspace_catalog_reload_failures_total``.
        """,
    ).tag(config=True)

    retention_days = Float(
        30.0,
        help="""
        How long a deleted server's (or user's) home disk is kept before the reclaimer deletes it.

        ``delete_forever`` labels the claim ``gpuworkspace.dev/disk-state=retained`` with a
        ``gpuworkspace.dev/retain-until`` annotation instead of deleting it; starting a server with the
        same name within this period re-adopts the disk.

        The default for profiles without ``storage.home.retention``; a profile's ``retention.days`` or
        ``retention.keepOnDelete: false`` takes precedence. The effective value is stamped on the disk
        at each start (``gpuworkspace.dev/retention-days``), and a deletion honours that stamp
        (docs/how-to/retention-and-reclaim.md).
        """,
    ).tag(config=True)

    unschedulable_timeout = Float(
        60.0,
        help="Seconds a pod may wait with FailedScheduling before the spawn fails with reason 'unschedulable'.",
    ).tag(config=True)

    attach_failure_timeout = Float(
        120.0,
        help="Seconds a pod may fail to attach or mount its disk before the spawn fails with reason 'disk'.",
    ).tag(config=True)

    audit_events = Enum(
        ["all", "disk", "none"],
        default_value="all",
        help="""
        Which audit records are also written as Kubernetes Events. Every record is always logged as one
        JSON object on the ``gpuworkspace.audit`` logger. ``all`` (default): the disk's transitions on
        the claim, and each workspace start, start failure and stop on the pod (or VM): two API writes
        per start/stop cycle beside the pod's own create and delete (measured in
        ``tests/e2e/test_audit.py``). ``disk``: only the home disk's transitions (created, adopted,
        retained, refused; the reclaimer's deletions) and refused duplicate pods. ``none``: log only.
        """,
    ).tag(config=True)

    team_group_prefix = Unicode(
        "team-",
        help="""
        Where a workspace's team comes from when its profile sets none (``spec.team``): the user's first
        group, in sorted order, whose name starts with this prefix, less the prefix (group ``team-nlp``:
        team ``nlp``). The team is the ``gpuworkspace.dev/team`` label of the pod or VM and of its disk,
        and part of each start's audit record. Empty: no group rule; only the catalog names teams.
        """,
    ).tag(config=True)

    release_name = Unicode(
        "jupyterhub",
        help="The z2jh release name, set as the ``release`` label that the chart's NetworkPolicies select.",
    ).tag(config=True)

    max_disks_per_user = Integer(
        0,
        min=0,
        help="""
        The most workspace disks one user may hold: container home claims and VM root disks, active
        or retained (a deleted server's disk counts until the reclaimer deletes it). 0: no limit.

        Checked only when a start would create a new disk; a start that uses or re-adopts the disk of
        that server name is never refused. Past the limit the start is refused with HTTP 403 (reason
        ``disk-limit``), a message naming the user's disks and what to do, and nothing is written to
        the cluster. See :doc:`/how-to/limits`.
        """,
    ).tag(config=True)

    max_disks_total = Integer(
        0,
        min=0,
        help="""
        The most workspace disks (home claims and VM root disks, active or retained, every user's) the
        workspace namespace may hold. 0: no limit. Enforced like ``max_disks_per_user``.
        """,
    ).tag(config=True)

    _sources: ClassVar[dict[str, CatalogSource]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Before super().__init__: JupyterHub may call load_state() from inside it.
        self._selection: Selection | None = None
        self._catalog_version = ""
        self._rejected = False
        self.workspace_state: dict[str, Any] = {}
        self._probe_token: str | None = None  # the culler's credential for this server alone
        self._ports = SpawnerPorts(self)  # what the runtimes may use of this spawner
        self._chosen: Runtime | None = None  # chosen at a start or from the state, when first needed
        self._progress = ProgressLog()  # the steps of the current (or last) start
        super().__init__(*args, **kwargs)

    @default("pvc_name_template")
    def _default_pvc_name_template(self) -> str:
        return "home-{user_server}"

    @default("storage_pvc_ensure")
    def _default_storage_pvc_ensure(self) -> bool:
        return False  # the home disk is ensured by the container runtime, never by KubeSpawner

    @default("delete_pvc")
    def _default_delete_pvc(self) -> bool:
        return False

    @default("apply_user_options")
    def _default_apply_user_options(self) -> Any:
        # JupyterHub >= 5.3 warns about options no hook handled; ours are validated and applied by
        # load_user_options() at the start of start(), before anything is written to the cluster.
        return _options_applied_at_start

    @default("profile_list")
    def _default_profile_list(self) -> Any:
        return self._catalog_profile_list

    # --- catalog -------------------------------------------------------------------------------

    @classmethod
    def catalog_source(cls, path: str) -> CatalogSource:
        """The shared, reloading catalog for ``path`` (raises CatalogError when it is invalid)."""
        if path not in cls._sources:
            cls._sources[path] = CatalogSource(path, on_reload_error=_count_reload_failure)
        return cls._sources[path]

    @property
    def catalog(self) -> Catalog:
        if not self.catalog_path:
            raise SpawnException(
                "This hub has no workspace catalog configured (GPUWorkspaceSpawner.catalog_path).",
                reason="catalog",
                status_code=500,
            )
        return self.catalog_source(self.catalog_path).current()

    def _groups(self) -> list[str]:
        return [g.name for g in self.user.groups]

    async def _catalog_profile_list(self, spawner: GPUWorkspaceSpawner) -> list[dict[str, Any]]:
        refusals = await form_refusals(spawner)  # a disk limit, said on the cards before the click
        return build_profile_list(spawner.catalog, spawner.user.name, spawner._groups(), refusals)

    async def load_user_options(self) -> None:
        """Validate user_options against the catalog before anything touches the cluster."""
        if self._selection is not None:
            return
        catalog = self.catalog
        try:
            selection = resolve_user_options(
                catalog, self.user_options, user=self.user.name, groups=self._groups()
            )
        except OptionsError as exc:
            self._rejected = True
            self._log_record("workspace-rejected", "Pod", self.pod_name, exc.message)
            raise SpawnException(
                exc.message, reason=exc.reason, status_code=_STATUS.get(exc.reason, 400)
            ) from None
        self._selection, self._catalog_version = selection, catalog.version
        self.default_url = DEFAULT_URLS[selection.ide]
        self._chosen = None  # the start chooses this selection's runtime

    def _identity(self) -> WorkspaceIdentity:
        return WorkspaceIdentity(
            user=self.user.name,
            server=self.name or "",
            namespace=self.namespace,
            release=self.release_name,
            owner=owner_key(getattr(self.user, "created", None)),  # the hub user record (ownership.py)
        )

    def _context(self) -> WorkspaceContext:
        assert self._selection is not None
        team = decide_team(self._selection.profile, self._groups(), group_prefix=self.team_group_prefix)
        return WorkspaceContext(
            identity=self._identity(),
            profile=self._selection.profile,
            catalog_version=self._catalog_version,
            ide=self._selection.ide,
            home_claim=self.pvc_name,
            team=team.team,
            team_source=team.source,
        )

    # --- manifests -----------------------------------------------------------------------------

    async def get_pod_manifest(self) -> Any:
        ws = self._context()
        self.image = ws.profile.image or ""  # a container profile has one (catalog); before the env
        pod = await super().get_pod_manifest()
        built = build_workspace_pod(gateway.to_dict(self.api, pod), ws)
        retention = decide_retention(ws.profile.storage.home.retention, self.retention_days)
        built = apply_conventions(built, ws, retention_days=retention.period.total_seconds() / 86400)
        return gateway.to_model(self.api, built, "V1Pod")

    def get_env(self) -> dict[str, str]:
        env: dict[str, str] = super().get_env()
        if (chosen := self._selection) is not None:
            env.update(workspace_env(chosen.profile, catalog_version=self._catalog_version, ide=chosen.ide))
        return env

    # --- start ---------------------------------------------------------------------------------

    @property
    def runtime(self) -> str:
        """``container`` or ``vm``: from the selected profile, else from the state of the last start."""
        if self._selection is not None:
            return self._selection.profile.runtime
        return str(self.workspace_state.get("runtime", "container"))

    async def _start(self) -> Any:
        try:
            return await self._start_workspace()
        except Exception as exc:
            error = as_kubernetes_error(exc)
            if error is None or isinstance(exc, SpawnException):
                raise
            # Not a 500 "Unhandled error" with a client traceback: what failed, and that nothing is lost.
            message = (
                f"The Kubernetes API failed while starting your workspace ({error}). Your disk is "
                "kept and nothing was lost; try again in a minute."
            )
            raise SpawnException(message, reason="api", status_code=503) from exc

    async def _start_reflector(
        self, kind: str, reflector_class: Any, replace: bool = False, **kwargs: Any
    ) -> Any:
        """KubeSpawner's, with reflectors whose lists are repeated after 429/5xx (see ``retrying``)."""
        return await super()._start_reflector(
            kind=kind, reflector_class=retrying(reflector_class), replace=replace, **kwargs
        )

    async def _make_create_pod_request(self, pod: Any, request_timeout: float) -> bool:
        """KubeSpawner's pod creation, repeated (by its backoff) after 429/5xx instead of failing."""
        try:
            return bool(await super()._make_create_pod_request(pod, request_timeout))
        except Exception as exc:  # the client library's ApiException, which only k8s/ imports
            if not is_unavailable(exc):
                raise
            self.log.warning(
                "Creating pod %s: the API answered %s; trying again",
                self.pod_name,
                getattr(exc, "status", "?"),
            )
            return False

    async def _make_delete_pod_request(
        self, pod_name: str, delete_options: Any, grace_seconds: int, request_timeout: float
    ) -> bool:
        """KubeSpawner's pod deletion, repeated after 429/5xx: a stop must not leave the pod running."""
        try:
            return bool(
                await super()._make_delete_pod_request(
                    pod_name, delete_options, grace_seconds, request_timeout
                )
            )
        except Exception as exc:  # the client library's ApiException, which only k8s/ imports
            if not is_unavailable(exc):
                raise
            self.log.warning(
                "Deleting pod %s: the API answered %s; trying again", pod_name, getattr(exc, "status", "?")
            )
            return False

    async def _start_workspace(self) -> Any:
        self._progress = ProgressLog()  # before any await: a page asking now follows this start
        await self.load_user_options()
        async with self._progress.recording(lambda: self._runtime().progress(), self._ports.next_pod_change):
            return await self._start_runtime()

    async def _start_runtime(self) -> Any:
        self._reset_healing()  # a new start: no stop intent, no rebuild history, no old failure
        self.workspace_state.pop(FAILURE_KEY, None)
        # the idle culler's credential for this server alone, in its state (:mod:`.probecredentials`)
        self._probe_token = issue_server_probe_token(self.user, self.name or "")
        self._save_state_now()
        others = choose_evicted(
            self.runtime, self.workspace_state.get("runtime"), self._runtime_context(), self._ports
        )
        return await self._runtime().start(others)

    def _runtime_context(self) -> RuntimeContext:
        return RuntimeContext(
            identity=self._identity(),
            workspace=self._context() if self._selection is not None else None,
            pod_name=self.pod_name,
            home_claim=self.pvc_name,
            request_timeout=self.k8s_api_request_timeout,
            retry_timeout=self.k8s_api_request_retry_timeout,
            unschedulable_timeout=self.unschedulable_timeout,
            attach_failure_timeout=self.attach_failure_timeout,
            retention_days=self.retention_days,
        )

    def _runtime(self) -> Runtime:
        """This server's runtime: the selected profile's, else the one in the hub state (chosen once per
        start or loaded state, for the names and the selection they had then)."""
        if self._chosen is None or self._chosen.kind != self.runtime:
            self._chosen = choose_runtime(self.runtime, self._runtime_context(), self._ports)
        return self._chosen

    def _container(self) -> ContainerRuntime:
        return ContainerRuntime(self._runtime_context(), self._ports)

    # KubeSpawner's own pod start, stop and poll: the container runtime's (through SpawnerPorts)

    async def _start_pod(self) -> Any:
        return await super()._start()

    async def _stop_pod(self, now: bool) -> None:
        await super().stop(now=now)

    async def _poll_pod(self) -> int | None:
        result: int | None = await super().poll()
        return result

    # self-healing's checks and records (container workspaces), by the container runtime
    async def _check_fencing(self, claim_name: str, *, own_uids: frozenset[str]) -> None:
        await self._container().check_fencing(own_uids=own_uids)

    async def _record_last_node(self, node: str | None) -> None:
        await self._container().record_last_node(node)

    def _claim(self) -> dict[str, Any] | None:
        return self._container().claim()

    def _pod(self) -> dict[str, Any] | None:
        return self._ports.cached("pods", self.pod_name)

    async def progress(self) -> Any:
        """Every step this start has passed (a page opened late sees them too), then each new one as the
        watches show it (:mod:`.progresslog`); no API calls."""
        async for step in self._progress.follow(lambda: self._runtime().progress()):
            yield {"progress": step.percent, "message": step.message}

    # --- stop and delete -----------------------------------------------------------------------

    async def stop(self, now: bool = False) -> None:
        self._probe_token = None
        revoke_server_probe_tokens(self.user, self.name or "")
        if self._rejected:  # refused before any cluster write: nothing to clean up
            self._rejected = False
            return
        await self._runtime().stop(now)

    async def poll(self) -> int | None:
        return await self._runtime().poll()

    async def delete_forever(self) -> None:
        """Retain every disk the server owns (never delete one): the reclaimer deletes them once retention
        ends. A server that ran as a container and as a VM has two (:mod:`.retaining`)."""
        why = "server-deleted" if self.name else "user-deleted"
        shared = bool(self.name) and "{user_server}" not in self.pvc_name_template
        await self._runtime().delete(datetime.now(UTC), why, home_shared=shared)

    @property
    def workspace_status(self) -> dict[str, Any] | None:
        """The workspace's state (000 §10) from the watch caches, for the home page; None before any watch."""
        state = self._runtime().status(datetime.now(UTC))
        if state is None:
            return None  # this hub has not watched the cluster since it started: nothing honest to say
        return with_last_failure(to_json(state), self.workspace_state.get(FAILURE_KEY))

    # --- state ---------------------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        state: dict[str, Any] = super().get_state()
        if self._selection is not None:
            state["gpuworkspace"] = {
                "runtime": self._selection.profile.runtime,
                "profile": self._selection.profile.slug,
                "catalog_version": self._catalog_version,
                "ide": self._selection.ide,
            }
        elif self.workspace_state:
            state["gpuworkspace"] = dict(self.workspace_state)
        if self._probe_token:
            state[PROBE_STATE_KEY] = self._probe_token
        return state

    def _save_state_now(self) -> None:
        """Store the state (runtime, names) at the start of a start, not only after it as JupyterHub does:
        a hub restarted mid-start then polls the pod or VM this start creates, and adopts or stops it,
        instead of forgetting a workload that goes on to run (an orphan holding GPUs and the disk)."""
        session = object_session(self.orm_spawner) if self.orm_spawner is not None else None
        if session is not None:
            self.orm_spawner.state = self.get_state()
            session.commit()

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        self._chosen = None
        self.workspace_state = dict(state.get("gpuworkspace") or {})
        self._probe_token = probe_token_from_state(state)

    def clear_state(self) -> None:
        """Forget the last start, but keep the runtime: delete_forever (on a stopped server) needs it."""
        super().clear_state()
        runtime, self._chosen = self.runtime, None
        self._selection, self._catalog_version, self._rejected = None, "", False
        self._probe_token = None  # revoked by stop(); a start issues a new one
        failure = self.workspace_state.get(FAILURE_KEY)  # why self-healing gave up: the home page says
        self.workspace_state = {"runtime": runtime, **({FAILURE_KEY: failure} if failure else {})}

    # --- audit (written by SpawnerPorts; also used by retaining, limiting and self-healing) --------

    def _log_record(self, action: Action, kind: str, name: str, message: str) -> None:
        self._ports.log_record(action, kind, name, message)

    async def _audit(
        self, action: Action, kind: str, name: str, message: str, obj: dict[str, Any] | None = None
    ) -> None:
        await self._ports.audit(action, kind, name, message, obj)


def _options_applied_at_start(spawner: GPUWorkspaceSpawner, user_options: Any) -> None:
    """See GPUWorkspaceSpawner._default_apply_user_options."""


def _count_reload_failure(error: CatalogError) -> None:
    CATALOG_RELOAD_FAILURES.inc()
    log.error("Invalid workspace catalog change; still serving the last good catalog:\n%s", error)


def load_catalog_or_exit(path: str) -> Catalog:
    """For jupyterhub_config.py: validate the catalog now, so the hub refuses to start on a bad one."""
    try:
        return GPUWorkspaceSpawner.catalog_source(path).current()
    except CatalogError as exc:
        raise SystemExit(f"gpuworkspace-spawner: invalid workspace catalog {path}:\n{exc}") from None
