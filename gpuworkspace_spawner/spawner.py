"""GPUWorkspaceSpawner: KubeSpawner with a profile catalog, a retained home disk and honest progress.

Orchestration only: the catalog package decides what a user may start, ``manifests`` builds the pod
and the claim, ``lifecycle`` decides what to do with a disk and when a start has failed, ``k8s`` talks
to the API. State lives on the cluster (labels and annotations); the hub keeps names in its state.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import socket
from datetime import UTC, datetime
from typing import Any, ClassVar

from kubespawner import KubeSpawner
from prometheus_client import Counter
from sqlalchemy.orm import object_session
from traitlets import Enum, Float, Integer, Unicode, default

from .audit import START_ACTIONS, Action, AuditRecord, build_audit_event, log_audit
from .catalog import (
    Catalog,
    CatalogError,
    CatalogSource,
    OptionsError,
    Selection,
    build_profile_list,
    resolve_user_options,
)
from .catalog.editors import editors_env
from .compat import SpawnException
from .k8s import Conflict, Forbidden, KubernetesError, NotFound, Unavailable, custom, gateway
from .k8s.custom import DATA_VOLUMES, NETWORK_FENCES, VM_INSTANCES, ClusterWatch
from .k8s.errors import as_kubernetes_error, is_unavailable
from .k8s.reflectors import ClaimReflector, retrying
from .lifecycle.diskpolicy import (
    build_policy_annotations,
    build_policy_patch,
    decide_retention,
    with_policy,
)
from .lifecycle.fencing import decide_fencing, evidence_needed, refuse_shared_disk
from .lifecycle.gpuholders import describe_gpu_holders
from .lifecycle.healing import with_last_failure
from .lifecycle.ownership import choose_home_claim
from .lifecycle.phasetiming import PhaseClock
from .lifecycle.retention import decide_home_disk
from .lifecycle.spawning import build_progress, decide_extra_pods, decide_spawn_failure
from .lifecycle.state import derive_state, to_json
from .limiting import form_refusals, new_disk_guard
from .manifests.conventions import apply_conventions, convention_env
from .manifests.names import (
    ANN_LAST_NODE,
    DISK_HOME,
    LABEL_DISK,
    WorkspaceContext,
    WorkspaceIdentity,
    owner_key,
)
from .manifests.pod import build_workspace_pod
from .manifests.provenance import build_start_details, decide_team
from .manifests.pvc import build_adopt_patch, build_home_pvc
from .manifests.vm import vm_names
from .probecredentials import STATE_KEY as PROBE_STATE_KEY
from .probecredentials import issue_probe_token, probe_token_from_state, revoke_probe_tokens
from .retaining import retain_server_disks
from .selfhealing import FAILURE_KEY, SelfHealing
from .spawnmetrics import observe_phases
from .vmruntime import VMRuntime

CATALOG_RELOAD_FAILURES = Counter(
    "gpuworkspace_catalog_reload_failures_total",
    "Catalog reloads that failed validation (the hub kept serving the last good catalog)",
)
CLUSTER_WATCH_READY_S = 30.0  # a fencing check waits this long for the first list of nodes/attachments
DEFAULT_URLS = {"jupyterlab": "/lab", "code-server": "/vscode/"}
_STATUS = {"forbidden-profile": 403}
log = logging.getLogger("gpuworkspace.catalog")


class GPUWorkspaceSpawner(VMRuntime, SelfHealing, KubeSpawner):
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
    _cluster_watches: ClassVar[dict[str, ClusterWatch]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Before super().__init__: JupyterHub may call load_state() from inside it.
        self._selection: Selection | None = None
        self._catalog_version = ""
        self._rejected = False
        self.workspace_state: dict[str, Any] = {}
        self._probe_token: str | None = None  # the culler's credential for this server alone
        super().__init__(*args, **kwargs)

    @default("pvc_name_template")
    def _default_pvc_name_template(self) -> str:
        return "home-{user_server}"

    @default("storage_pvc_ensure")
    def _default_storage_pvc_ensure(self) -> bool:
        return False  # the home disk is ensured by _ensure_home_disk, never by KubeSpawner

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
        if selection.profile.runtime == "vm":
            self.pvc_name = vm_names(self._context().identity).disk  # the root disk is the VM's home
        else:
            self.image = selection.profile.image

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
        pod = await super().get_pod_manifest()
        ws = self._context()
        built = build_workspace_pod(gateway.to_dict(self.api, pod), ws)
        retention = decide_retention(ws.profile.storage.home.retention, self.retention_days)
        built = apply_conventions(built, ws, retention_days=retention.period.total_seconds() / 86400)
        return gateway.to_model(self.api, built, "V1Pod")

    def get_env(self) -> dict[str, str]:
        env: dict[str, str] = super().get_env()
        if self._selection is not None:
            env["GPUWORKSPACE_PROFILE"] = self._selection.profile.slug
            env["GPUWORKSPACE_CATALOG_VERSION"] = self._catalog_version
            env["GPUWORKSPACE_IDE"] = self._selection.ide
            env.update(editors_env(self._selection.profile.editors))  # the launcher's "Open VS Code"
            env.update(convention_env(self._selection.profile))  # /workspace, /checkpoints, quota
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
        await self.load_user_options()
        self._reset_healing()  # a new start: no stop intent, no rebuild history, no old failure
        self.workspace_state.pop(FAILURE_KEY, None)
        self._issue_probe_credential()
        self._save_state_now()
        if self.runtime == "vm":
            return await self._start_vm_audited()
        await self._start_watching_pods()
        prepared = asyncio.get_running_loop().time()
        await self._ensure_home_disk()
        await self._halt_workspace_vm()
        await self._remove_duplicate_pods()
        await self._check_fencing(self.pvc_name, own_uids=frozenset())
        self._log_record("workspace-starting", "Pod", self.pod_name, "Starting the workspace")
        started = asyncio.get_running_loop().time()
        task = asyncio.ensure_future(super()._start())
        clock = PhaseClock()
        clock.observe("prepare", prepared)  # claim, fencing check: before the pod exists
        try:
            url = await self._supervise(task, started, clock)
        except SpawnException as exc:
            await self._audit("workspace-start-failed", "Pod", self.pod_name, f"{exc.reason}: {exc.message}")
            raise
        await self._audit("workspace-started", "Pod", self.pod_name, f"Workspace ready at {url}")
        self._remember_pod(self._pod())  # what a rebuild copies
        await self._record_last_node(((self._pod() or {}).get("spec") or {}).get("nodeName"))
        return url

    async def _start_vm_audited(self) -> str:
        name = self._vm_names().vm
        self._log_record("workspace-starting", "VirtualMachine", name, "Starting the VM workspace")
        try:
            url = await self._start_vm()
        except SpawnException as exc:
            failed = f"{exc.reason}: {exc.message}"
            if self._rejected:  # refused before any write (a disk limit): no Event either
                self._log_record("workspace-start-failed", "VirtualMachine", name, failed)
            else:
                await self._audit("workspace-start-failed", "VirtualMachine", name, failed)
            raise
        await self._audit("workspace-started", "VirtualMachine", name, f"VM workspace ready at {url}")
        vmi = self._cached("vmis", name) or {}
        await self._record_last_node((vmi.get("status") or {}).get("nodeName"))
        return url

    async def _halt_workspace_vm(self) -> None:
        """One active compute per workspace: a running VM of this workspace stops before a pod starts."""
        if self.workspace_state.get("runtime") != "vm":
            return  # the last start of this server was no VM (kept in the hub state across stops)
        names = vm_names(self._context().identity)
        await self._start_vm_watchers()
        vm = self._cached("vms", names.vm)
        if vm is not None and (vm.get("spec") or {}).get("runStrategy") != "Halted":
            await self._audit(
                "duplicate-pod-removed", "VirtualMachine", names.vm, "Halting this workspace's VM"
            )
            await self._stop_vm(names)

    async def _check_fencing(self, claim_name: str, *, own_uids: frozenset[str]) -> None:
        """Refuse (reason 'fencing') to start compute on a disk another node may still write to."""
        timeout = self.k8s_api_request_timeout
        claim = self._claim() if claim_name == self.pvc_name and self.runtime == "container" else None
        if claim is None:
            try:
                claim = await gateway.read_pvc(self.api, self.namespace, claim_name, request_timeout=timeout)
            except NotFound:
                return  # not provisioned yet: attached nowhere
        shared = refuse_shared_disk(claim)
        if shared:
            raise SpawnException(shared, reason="disk", status_code=409)
        pv_name = (claim.get("spec") or {}).get("volumeName")
        try:
            attachments, nodes = (
                await self._cluster_watch("volumeattachments"),
                await self._cluster_watch("nodes"),
            )
        except Unavailable as exc:  # fail closed: no evidence, no start
            raise SpawnException(
                f"Cannot check where disk {claim_name} is attached ({exc}); try again shortly",
                reason="fencing",
                status_code=503,
            ) from None
        last_node = self._last_node()
        if not evidence_needed(pv_name, list(attachments.objects.values()), nodes.objects.values()):
            return  # the fast path: attached nowhere and every node reachable (read from watch caches)
        assert pv_name  # evidence_needed is False without a volume
        pods = await custom.list_all_pods(self.namespace, request_timeout=timeout)
        api = custom.custom_api()
        vmis = await custom.list_namespaced(api, VM_INSTANCES, self.namespace, request_timeout=timeout)
        verdict = decide_fencing(
            claim=claim,
            pv_name=pv_name,
            attachments=attachments.attached(pv_name),
            consumers=[*pods, *vmis],
            nodes=await custom.list_nodes(request_timeout=timeout),
            fences=await custom.list_cluster(api, NETWORK_FENCES, request_timeout=timeout),
            own_uids=own_uids,
            last_node=last_node,
        )
        message = f"{verdict.reason} Evidence: {json.dumps(verdict.evidence, sort_keys=True)}"
        if verdict.action != "pass":
            await self._audit("disk-refused", "PersistentVolumeClaim", claim_name, message, claim)
            raise SpawnException(
                f"Your disk may still be in use on another node, so it was not attached again: {verdict.reason}. "
                "An administrator has been told what to check.",
                reason="fencing",
                log_message=f"fencing check refused {claim_name}: {verdict.reason}; admin: {verdict.admin_hint}",
                status_code=409,
            )
        self._log_record(
            "disk-adopted", "PersistentVolumeClaim", claim_name, f"fencing check passed: {message}"
        )

    def _disk_handle(self) -> dict[str, Any] | None:
        """The object that carries the disk's state: the home claim, or the VM's root DataVolume."""
        if self.runtime == "vm":
            return self._cached("datavolumes", vm_names(self._identity()).disk)
        return self._claim()

    def _last_node(self) -> str | None:
        handle = self._disk_handle() or {}
        return ((handle.get("metadata") or {}).get("annotations") or {}).get(ANN_LAST_NODE)

    async def _record_last_node(self, node: str | None) -> None:
        """Remember where the disk is attached (one write, only when the node changes)."""
        if not node or node == self._last_node():
            return
        patch = {"metadata": {"annotations": {ANN_LAST_NODE: node}}}
        timeout = self.k8s_api_request_timeout
        if self.runtime == "vm":
            disk = vm_names(self._identity()).disk
            await custom.patch(
                custom.custom_api(), DATA_VOLUMES, self.namespace, disk, patch, request_timeout=timeout
            )
        else:
            await gateway.patch_pvc(self.api, self.namespace, self.pvc_name, patch, request_timeout=timeout)

    @classmethod
    async def _cluster_watch(cls, kind: str) -> ClusterWatch:
        if kind not in cls._cluster_watches:
            api, method = (
                ("StorageV1Api", "list_volume_attachment")
                if kind == "volumeattachments"
                else ("CoreV1Api", "list_node")
            )
            cls._cluster_watches[kind] = ClusterWatch(api, method, log)
        await cls._cluster_watches[kind].ready(timeout_s=CLUSTER_WATCH_READY_S)
        return cls._cluster_watches[kind]

    async def _supervise(self, task: asyncio.Future[Any], started: float, clock: PhaseClock) -> Any:
        """Wait for KubeSpawner's start, failing early (with a reason) when the pod cannot come up."""
        loop = asyncio.get_running_loop()
        while True:
            clock.observe(build_progress(self._claim(), self._pod(), self.events).phase, loop.time())
            done, _ = await asyncio.wait({task}, timeout=1.0)
            if done:
                result = self._start_result(task)
                # the last sample, when the start returns: a start quicker than one sampling period
                # still reaches its last phase (``ready``), as the phase clock's contract says
                now = loop.time()
                clock.observe(build_progress(self._claim(), self._pod(), self.events).phase, now)
                observe_phases(clock.finish(now))
                return result
            failure = decide_spawn_failure(
                self._claim(),
                self._pod(),
                self.events,
                elapsed_s=loop.time() - started,
                unschedulable_after_s=self.unschedulable_timeout,
                attach_failure_after_s=self.attach_failure_timeout,
            )
            if failure is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                holders = self._gpu_holders(failure.message) if failure.reason == "unschedulable" else ""
                raise SpawnException(failure.message + holders, reason=failure.reason)

    def _gpu_holders(self, message: str) -> str:
        """Who holds the GPUs a refused start asked for, from the pod watch cache (no API calls)."""
        match = re.search(r"Insufficient (nvidia\.com/[\w.\-]+)", message)
        if match is None or self.pod_reflector is None:
            return ""
        pods = list(self.pod_reflector.pods.values())
        resource = match.group(1).rstrip(".")  # "... Insufficient nvidia.com/gpu.shared. preemption: ..."
        holders = describe_gpu_holders(pods, resource, exclude=self.pod_name)
        return f". Currently held by: {holders}" if holders else ""

    def _start_result(self, task: asyncio.Future[Any]) -> Any:
        try:
            return task.result()
        except TimeoutError as exc:
            step = build_progress(self._claim(), self._pod(), self.events)
            raise SpawnException(
                f"The workspace did not become ready in time; last step: {step.message}", reason="timeout"
            ) from exc
        except Exception as exc:
            error = as_kubernetes_error(exc)
            if isinstance(error, Forbidden) and error.quota_exceeded:
                raise SpawnException(
                    f"Your team's quota is exhausted: {error.message}", reason="quota"
                ) from exc
            raise

    async def _start_watching_claims(self) -> ClaimReflector:
        reflector: ClaimReflector = await self._start_reflector(
            kind="home-claims",
            reflector_class=ClaimReflector,
            labels={LABEL_DISK: DISK_HOME},
            omit_namespace=False,
        )
        return reflector

    def _claim(self) -> dict[str, Any] | None:
        reflector = self.__class__.reflectors.get(self._get_reflector_key("home-claims"))
        return reflector.claims.get(f"{self.namespace}/{self.pvc_name}") if reflector else None

    def _pod(self) -> dict[str, Any] | None:
        reflector = self.pod_reflector
        return reflector.pods.get(f"{self.namespace}/{self.pod_name}") if reflector else None

    async def _ensure_home_disk(self) -> None:
        """Create, re-adopt or reuse the home claim; refuse (reason 'disk') when it is not ours to use."""
        reflector = await self._start_watching_claims()
        base = self._expand_user_properties(self.pvc_name_template)
        choice = choose_home_claim(list(reflector.claims.values()), base, self._identity())
        if choice.name != self.pvc_name:
            self.log.info("Home disk of %s: %s", self._log_name, choice.reason)
        self.pvc_name = choice.name
        ws = self._context()
        claim = self._claim()
        request_timeout = self.k8s_api_request_timeout
        home = ws.profile.storage.home
        policy = build_policy_annotations(
            decide_retention(home.retention, self.retention_days), home.snapshots
        )
        for _ in range(3):
            verdict = decide_home_disk(claim, ws.identity)
            if verdict.action == "use":
                await self._stamp_policy(claim, policy)
                break
            if verdict.action == "refuse":
                await self._audit("disk-refused", "PersistentVolumeClaim", self.pvc_name, verdict.reason)
                raise SpawnException(verdict.reason, reason="disk", status_code=409)
            try:
                if verdict.action == "create":
                    async with new_disk_guard(self, "PersistentVolumeClaim", self.pvc_name):
                        body = with_policy(build_home_pvc(ws), policy, patch=False)
                        claim = await gateway.create_pvc(
                            self.api, self.namespace, body, request_timeout=request_timeout
                        )
                    await self._audit(
                        "disk-created", "PersistentVolumeClaim", self.pvc_name, verdict.reason, claim
                    )
                else:
                    patch = with_policy(build_adopt_patch(ws), policy, patch=True)
                    claim = await gateway.patch_pvc(
                        self.api, self.namespace, self.pvc_name, patch, request_timeout=request_timeout
                    )
                    await self._audit(
                        "disk-adopted", "PersistentVolumeClaim", self.pvc_name, verdict.reason, claim
                    )
                break
            except Conflict:
                claim = await gateway.read_pvc(
                    self.api, self.namespace, self.pvc_name, request_timeout=request_timeout
                )
            except NotFound:
                claim = None
            except Forbidden as exc:
                reason = "quota" if exc.quota_exceeded else "disk"
                raise SpawnException(f"Cannot create your home disk: {exc.message}", reason=reason) from exc
        self._pvc_exists = True

    async def _stamp_policy(self, claim: dict[str, Any] | None, policy: dict[str, str | None]) -> None:
        """Bring the retention and snapshot schedule on a disk in use up to date with this start's profile."""
        patch = build_policy_patch(claim or {}, policy)
        if claim is not None and patch is not None:
            await gateway.patch_pvc(
                self.api, self.namespace, self.pvc_name, patch, request_timeout=self.k8s_api_request_timeout
            )

    async def _remove_duplicate_pods(self) -> None:
        """At most one active pod per user workspace, also for pods a previous hub left behind."""
        reflector = await self._start_watching_pods()
        identity = self._context().identity
        extra = decide_extra_pods(list(reflector.pods.values()), identity, keep_name=self.pod_name)
        for name in extra:
            await self._audit("duplicate-pod-removed", "Pod", name, f"Another pod of this workspace: {name}")
            with contextlib.suppress(NotFound):
                await gateway.delete_pod(
                    self.api, self.namespace, name, grace_s=0, request_timeout=self.k8s_api_request_timeout
                )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.k8s_api_request_retry_timeout
        # KubeSpawner's reflector has no change event; this reads its watch cache, not the API.
        while any(f"{self.namespace}/{n}" in reflector.pods for n in extra) and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.2)

    async def progress(self) -> Any:
        """Spawn progress from the claim, the pod and its events (local watch caches, no API calls)."""
        last = None
        while True:
            vm = self.runtime == "vm"
            step = self._vm_progress() if vm else build_progress(self._claim(), self._pod(), self.events)
            if (step.phase, step.message) != last:
                last = (step.phase, step.message)
                yield {"progress": step.percent, "message": step.message}
            if self._start_future is not None and self._start_future.done():
                break
            await asyncio.sleep(1)

    # --- stop and delete -----------------------------------------------------------------------

    async def stop(self, now: bool = False) -> None:
        self._revoke_probe_credential()
        if self._rejected:  # refused before any cluster write: nothing to clean up
            self._rejected = False
            return
        if self.runtime == "vm":
            names = vm_names(self._identity())
            await self._stop_vm(names)
            await self._audit("workspace-stopped", "VirtualMachine", names.vm, "VM stopped; root disk kept")
            return
        await super().stop(now=now)
        await self._audit("workspace-stopped", "Pod", self.pod_name, "Workspace stopped; home disk kept")

    async def poll(self) -> int | None:
        if self.runtime == "vm":
            return await self._poll_vm(vm_names(self._identity()))
        result: int | None = await super().poll()
        return result

    async def delete_forever(self) -> None:
        """Retain every disk the server owns (never delete one): the reclaimer deletes them once retention
        ends. A server that ran as a container and as a VM has two (:mod:`.retaining`)."""
        now = datetime.now(UTC)
        why = "server-deleted" if self.name else "user-deleted"
        shared = bool(self.name) and "{user_server}" not in self.pvc_name_template
        await retain_server_disks(
            self, now, why, hub_days=self.retention_days, home_shared=shared, vm=self.runtime == "vm"
        )

    @property
    def workspace_status(self) -> dict[str, Any] | None:
        """The workspace's state (000 §10) from the watch caches, for the home page; None before any watch."""
        vm = self.runtime == "vm"
        if (
            self.__class__.reflectors.get(self._get_reflector_key("datavolumes" if vm else "home-claims"))
            is None
        ):
            return None  # this hub has not watched the cluster since it started: nothing honest to say
        if vm:
            names = vm_names(self._identity())
            dv = self._cached("datavolumes", names.disk)
            state = derive_state(
                runtime="vm",
                disk=dv,
                data_volume=dv,
                pod=None,
                vm=self._cached("vms", names.vm),
                vmi=self._cached("vmis", names.vm),
                now=datetime.now(UTC),
            )
        else:
            state = derive_state(
                runtime="container",
                disk=self._claim(),
                data_volume=None,
                pod=self._pod(),
                vm=None,
                vmi=None,
                now=datetime.now(UTC),
            )
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

    def _issue_probe_credential(self) -> None:
        """A token that opens this server alone, for the idle culler's probes (:mod:`.probecredentials`).

        The culler reads it from this server's state; it never sends its own token to user code.
        """
        orm_user = getattr(self.user, "orm_user", None)
        if orm_user is None:  # no hub database (a spawner built outside a hub): nothing to issue
            return
        self._probe_token = issue_probe_token(orm_user, self.name or "")

    def _revoke_probe_credential(self) -> None:
        self._probe_token = None
        orm_user = getattr(self.user, "orm_user", None)
        if orm_user is not None:
            revoke_probe_tokens(orm_user, self.name or "")

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
        self.workspace_state = dict(state.get("gpuworkspace") or {})
        self._probe_token = probe_token_from_state(state)

    def clear_state(self) -> None:
        """Forget the last start, but keep the runtime: delete_forever (on a stopped server) needs it."""
        super().clear_state()
        runtime = self.runtime
        self._selection, self._catalog_version, self._rejected = None, "", False
        self._probe_token = None  # revoked by stop(); a start issues a new one
        failure = self.workspace_state.get(FAILURE_KEY)  # why self-healing gave up: the home page says
        self.workspace_state = {"runtime": runtime, **({FAILURE_KEY: failure} if failure else {})}

    # --- audit ---------------------------------------------------------------------------------

    def _record(
        self, action: Action, kind: str, name: str, message: str, obj: dict[str, Any] | None = None
    ) -> AuditRecord:
        selection = self._selection
        return AuditRecord(
            action=action,
            user=self.user.name,
            server=self.name or "",
            namespace=self.namespace,
            kind=kind,
            name=name,
            message=message,
            profile=selection.profile.slug if selection else "",
            catalog_version=self._catalog_version,
            uid=str(((obj or {}).get("metadata") or {}).get("uid", "")),
            details=build_start_details(self._context()) if selection and action in START_ACTIONS else {},
        )

    def _log_record(self, action: Action, kind: str, name: str, message: str) -> None:
        log_audit(self._record(action, kind, name, message), now=datetime.now(UTC), logger=self.log)

    async def _audit(
        self, action: Action, kind: str, name: str, message: str, obj: dict[str, Any] | None = None
    ) -> None:
        """Log the record; write it as an Event too when ``audit_events`` asks (failures only logged)."""
        record = self._record(action, kind, name, message, obj)
        now = datetime.now(UTC)
        log_audit(record, now=now, logger=self.log)
        disk_record = kind == "PersistentVolumeClaim" or action == "duplicate-pod-removed"
        if self.audit_events == "none" or (self.audit_events == "disk" and not disk_record):
            return
        event = build_audit_event(record, now=now, instance=socket.gethostname())
        try:
            await gateway.create_event(
                self.api, self.namespace, event, request_timeout=self.k8s_api_request_timeout
            )
        except KubernetesError as exc:
            self.log.warning("Could not record audit event %s for %s: %s", action, name, exc)


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
