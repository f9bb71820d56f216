"""The job operations: read the cluster, ask the pure core (:mod:`gpuworkspace_spawner.jobs`), act, audit.

Stateless (Kubernetes is the database). A submission snapshots the workspace's home disk, restores the
snapshot as a new claim and creates the suspended Job that Kueue admits; the snapshot and the claim are
then handed to the Job (ownerReferences), so Kubernetes' garbage collector deletes them with it. A
failure at any step deletes what the submission had created: nothing is left half-made.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import string
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ...audit import Action, AuditRecord, write_audit
from ...catalog import CatalogSource
from ...catalog.model import WorkspaceProfile
from ...jobs.manifests import (
    QUEUE_LABEL,
    JobContext,
    build_code_claim,
    build_code_snapshot,
    build_job,
    owned_by,
)
from ...jobs.offer import usable_profiles
from ...jobs.state import job_view
from ...jobs.submission import Request, SubmissionError, check_submission, job_name
from ...k8s import Conflict, KubernetesError, NotFound, batch, gateway, storage
from ...lifecycle.diskops import snapshot_progress
from ...manifests.names import (
    ANN_PROFILE,
    ANN_USERNAME,
    DISK_HOME,
    KIND_JOB,
    LABEL_DISK,
    LABEL_JOB,
    LABEL_KIND,
    WorkspaceIdentity,
    image_digest,
)
from .. import access
from ..serving import ServiceError

log = logging.getLogger("gpuworkspace.jobs")
Obj = dict[str, Any]
_SUFFIX = string.ascii_lowercase + string.digits
JOB_SELECTOR = f"{LABEL_KIND}={KIND_JOB}"
LOG_LIMIT_BYTES = 1 << 20


@dataclass(frozen=True)
class Settings:
    namespace: str = "gpu-workspaces"
    service_name: str = "gpuworkspace-jobs"
    identity: str = "system:serviceaccount:jhub:gpuworkspace-jobs"  # what creates the Jobs (audit)
    snapshot_class: str | None = None
    snapshot_timeout_s: float = 300
    request_timeout_s: float = 30
    ttl_after_finished_s: int = 7 * 24 * 3600
    events: bool = True


def _of_job(meta: Obj, name: str) -> bool:
    """Whether a claim or snapshot (its metadata) is the one this service made for job ``name``."""
    labels = meta.get("labels") or {}
    return labels.get(LABEL_KIND) == KIND_JOB and labels.get(LABEL_JOB) == name


def _owner(job: Obj) -> str:
    return str(((job.get("metadata") or {}).get("annotations") or {}).get(ANN_USERNAME, ""))


class JobOperations:
    def __init__(
        self,
        api: Any,
        settings: Settings,
        catalog: CatalogSource,
        groups_of: Callable[[str], Awaitable[frozenset[str]]],
    ) -> None:
        self.api, self.settings, self.catalog, self.groups_of = api, settings, catalog, groups_of

    @property
    def _rt(self) -> float:
        return self.settings.request_timeout_s

    # ------------------------------------------------------------------------ who
    def may_see(self, caller: Obj, job: Obj) -> bool:
        """The job's owner, and admins (``admin:servers``); nobody else."""
        if access.is_admin(caller):
            return True
        return caller.get("kind", "user") == "user" and caller.get("name") == _owner(job)

    async def _groups(self, caller: Obj) -> frozenset[str]:
        groups = caller.get("groups")
        if isinstance(groups, list):
            return frozenset(str(g) for g in groups)
        return await self.groups_of(str(caller.get("name", "")))  # the token cannot read its groups

    # ------------------------------------------------------------------------ audit
    async def audit(self, action: Action, job: Obj, message: str, caller: Obj, **details: Any) -> None:
        meta = job.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        record = AuditRecord(
            action=action,
            user=_owner(job),
            server=str(annotations.get("gpuworkspace.dev/servername", "")),
            namespace=self.settings.namespace,
            kind="Job",
            name=str(meta.get("name", "")),
            message=message,
            profile=str(annotations.get(ANN_PROFILE, "")),
            catalog_version=str(annotations.get("gpuworkspace.dev/catalog-version", "")),
            uid=str(meta.get("uid", "")),
            details=details,
            actor=access.who(caller),
        )
        await write_audit(record, api=self.api if self.settings.events else None, request_timeout=self._rt)

    # ------------------------------------------------------------------------ submit
    async def _home(self, identity: WorkspaceIdentity) -> Obj:
        selector = ",".join(
            f"{k}={v}" for k, v in {**identity.selector_labels, LABEL_DISK: DISK_HOME}.items()
        )
        listed = await gateway.list_pvcs(self.api, identity.namespace, selector, request_timeout=self._rt)
        homes = [c for c in listed.get("items") or [] if identity.owns(c.get("metadata"))]
        if not homes:
            server = identity.server or "default"
            raise ServiceError(404, f"no home disk for {identity.user}'s workspace {server!r}: start it once")
        home: dict[str, Any] = homes[0]
        return home

    def _context(self, request: Request, identity: WorkspaceIdentity, home: Obj, caller: Obj) -> JobContext:
        catalog = self.catalog.current()
        slug = (home["metadata"].get("annotations") or {}).get(ANN_PROFILE)
        workspace: WorkspaceProfile | None = catalog.get(str(slug)) if slug else None
        path = request.notebook or request.script or "job"
        suffix = "".join(secrets.choice(_SUFFIX) for _ in range(5))
        # a workspace whose profile left the catalog: the defaults, and no network profile (the
        # namespace's default deny: no egress at all), never more than its workspace had
        ws = workspace or WorkspaceProfile(slug="", display_name="")
        return JobContext(
            submission=request.submission(job_name(identity.user, path, suffix)),
            profile=request.profile,
            identity=identity,
            home_claim=home["metadata"]["name"],
            home_mount_path=ws.storage.home.mount_path,
            catalog_version=catalog.version,
            submitted_by=access.who(caller),
            security=ws.security,
            network_profile=ws.security.network_profile,
            storage_class=(home.get("spec") or {}).get("storageClassName"),
            ttl_after_finished_s=self.settings.ttl_after_finished_s,
        )

    async def submit(self, caller: Obj, body: Obj) -> Obj:
        if caller.get("kind", "user") != "user":
            raise ServiceError(
                403, f"{access.who(caller)} is not a user: jobs run as the user who submits them"
            )
        user = str(caller["name"])
        try:
            request = check_submission(
                body, self.catalog.current(), user=user, groups=await self._groups(caller)
            )
        except SubmissionError as exc:
            log.info("Job submission by %s refused: %s", user, exc.message)
            raise ServiceError(400, exc.message) from None
        identity = WorkspaceIdentity(user=user, server=request.server, namespace=self.settings.namespace)
        ctx = self._context(request, identity, await self._home(identity), caller)
        undo: list[Callable[[], Awaitable[Any]]] = []
        try:
            job = await self._create(ctx, undo)
        except BaseException as exc:
            await self._undo(undo)
            if isinstance(exc, ServiceError | KubernetesError | TimeoutError):
                stub = {"metadata": {"name": ctx.submission.name, "annotations": {ANN_USERNAME: user}}}
                await self.audit("job-submit-failed", stub, f"Job not submitted, nothing kept: {exc}", caller)
            raise
        details = {
            "workspace": identity.server or "default",
            "notebook": ctx.submission.notebook,
            "script": ctx.submission.script,
            "parameters": dict(ctx.submission.parameters),
            "jobProfile": ctx.profile.slug,
            "image": ctx.profile.image,
            "imageDigest": image_digest(ctx.profile.image),
            "queue": ctx.profile.queue,
            "priorityClass": ctx.profile.priority_class,
            "identity": self.settings.identity,
            "codeSnapshot": ctx.snapshot_name,
        }
        what = ctx.submission.notebook or ctx.submission.script
        message = (
            f"Job {ctx.submission.name} submitted to queue {ctx.profile.queue}: {what} on {ctx.profile.slug}"
        )
        await self.audit("job-submitted", job, message, caller, **details)
        return job_view(job, None)

    async def _create(self, ctx: JobContext, undo: list[Callable[[], Awaitable[Any]]]) -> Obj:
        ns, rt = self.settings.namespace, self._rt
        snap = await storage.create_snapshot(
            self.api,
            ns,
            build_code_snapshot(ctx, snapshot_class=self.settings.snapshot_class),
            request_timeout=rt,
        )
        undo.append(
            lambda: storage.delete_snapshot(
                self.api, ns, ctx.snapshot_name, uid=snap["metadata"]["uid"], request_timeout=rt
            )
        )
        snap = await self._wait_ready(ctx.snapshot_name) or snap
        size = str((snap.get("status") or {}).get("restoreSize") or "1Gi")
        await gateway.create_pvc(self.api, ns, build_code_claim(ctx, size=size), request_timeout=rt)
        # read again when undone: the volume binder updates a new claim at once (a new resourceVersion)
        undo.append(lambda: self._delete_claim_of(ctx.submission.name, ctx.code_claim))
        job = await batch.create_job(self.api, ns, build_job(ctx), request_timeout=rt)
        undo.append(
            lambda: batch.delete_job(
                self.api, ns, ctx.submission.name, uid=job["metadata"]["uid"], request_timeout=rt
            )
        )
        await gateway.patch_pvc(self.api, ns, ctx.code_claim, owned_by(job), request_timeout=rt)
        await batch.patch_snapshot(self.api, ns, ctx.snapshot_name, owned_by(job), request_timeout=rt)
        return job

    async def _wait_ready(self, name: str) -> Obj | None:
        try:
            snap = await storage.wait_for_snapshot(
                self.api,
                self.settings.namespace,
                name,
                lambda s: s is None or snapshot_progress(s)[0] == "ready",
                timeout_s=self.settings.snapshot_timeout_s,
                request_timeout=self._rt,
            )
        except TimeoutError:
            raise ServiceError(504, f"the snapshot of the home disk ({name}) was not ready in time") from None
        if snap is None:
            raise ServiceError(409, f"the snapshot of the home disk ({name}) was deleted while waiting")
        return snap

    async def _undo(self, undo: list[Callable[[], Awaitable[Any]]]) -> None:
        for step in reversed(undo):
            try:
                await step()
            except NotFound:
                pass
            except KubernetesError as exc:
                log.error("Undoing a failed submission: %s (delete it by hand)", exc)

    # ------------------------------------------------------------------------ read
    async def profiles(self, caller: Obj) -> list[Obj]:
        """The job profiles the caller may submit to (none for a service: jobs run as users)."""
        if caller.get("kind", "user") != "user":
            return []
        user = str(caller.get("name", ""))
        return usable_profiles(self.catalog.current(), user=user, groups=await self._groups(caller))

    async def _workloads(self) -> dict[str, Obj]:
        items = await batch.list_workloads(self.api, self.settings.namespace, request_timeout=self._rt)
        return {str((w["metadata"].get("labels") or {}).get(batch.JOB_UID_LABEL)): w for w in items}

    async def _list_jobs(self) -> list[Obj]:
        return await batch.list_jobs(
            self.api, self.settings.namespace, JOB_SELECTOR, request_timeout=self._rt
        )

    async def _read_job(self, name: str) -> Obj:
        try:
            return await batch.read_job(self.api, self.settings.namespace, name, request_timeout=self._rt)
        except NotFound:
            raise ServiceError(404, f"no job {name}") from None

    async def jobs(self, caller: Obj) -> list[Obj]:
        listed = await self._list_jobs()
        mine = [
            j
            for j in listed
            if self.may_see(caller, j) and QUEUE_LABEL in (j["metadata"].get("labels") or {})
        ]
        workloads = await self._workloads() if mine else {}
        views = [job_view(j, workloads.get(j["metadata"].get("uid", ""))) for j in mine]
        return sorted(views, key=lambda v: str(v.get("created") or ""), reverse=True)

    async def readable_job(self, caller: Obj, name: str) -> Obj:
        job = await self._read_job(name)
        if (job["metadata"].get("labels") or {}).get(LABEL_KIND) != KIND_JOB:
            raise ServiceError(404, f"no job {name}")  # a Job that this service did not make
        if not self.may_see(caller, job):
            raise ServiceError(
                403, f"{access.who(caller)} may not see or cancel job {name}: it is not theirs"
            )
        return job

    async def job(self, caller: Obj, name: str) -> Obj:
        job = await self.readable_job(caller, name)
        return job_view(job, (await self._workloads()).get(job["metadata"].get("uid", "")))

    async def logs(self, caller: Obj, name: str) -> str:
        job = await self.readable_job(caller, name)
        pods = await gateway.list_pods(
            self.api,
            self.settings.namespace,
            f"batch.kubernetes.io/controller-uid={job['metadata']['uid']}",
            request_timeout=self._rt,
        )
        items = sorted(pods.get("items") or [], key=lambda p: p["metadata"].get("creationTimestamp", ""))
        if not items:
            return ""
        with contextlib.suppress(NotFound):
            return await batch.read_pod_log(
                self.api,
                self.settings.namespace,
                items[-1]["metadata"]["name"],
                container="job",
                limit_bytes=LOG_LIMIT_BYTES,
                request_timeout=self._rt,
            )
        return ""

    # ------------------------------------------------------------------------ cancel
    async def cancel(self, caller: Obj, name: str) -> Obj:
        job = await self.readable_job(caller, name)
        meta = job["metadata"]
        before = job_view(job, None)["state"]
        # What the submission made for the job first, then the Job: its ownerReferences make the garbage
        # collector the backstop, never the only way they go (nothing is left if it is slow or off).
        await self._delete_made_for(name, meta.get("annotations") or {})
        with contextlib.suppress(NotFound):
            await batch.delete_job(
                self.api, self.settings.namespace, name, uid=meta["uid"], request_timeout=self._rt
            )
        message = f"Job {name} cancelled (it was {before}); its pods, code claim and snapshot deleted"
        await self.audit("job-cancelled", job, message, caller, state=before)
        return {"name": name, "cancelled": True, "was": before, "message": message}

    async def _delete_made_for(self, name: str, annotations: Obj) -> None:
        """Delete job ``name``'s code claim and snapshot, if they are still the ones made for it."""
        ns, rt = self.settings.namespace, self._rt
        claim = annotations.get("gpuworkspace.dev/code-claim")
        if claim:
            await self._delete_claim_of(name, claim)
        snapshot = annotations.get("gpuworkspace.dev/code-snapshot")
        if snapshot:
            with contextlib.suppress(NotFound, Conflict):
                current = await storage.read_snapshot(self.api, ns, snapshot, request_timeout=rt)
                if _of_job(current["metadata"], name):
                    await storage.delete_snapshot(
                        self.api, ns, snapshot, uid=current["metadata"]["uid"], request_timeout=rt
                    )

    async def _delete_claim_of(self, name: str, claim: str) -> None:
        """Delete ``claim`` if it is still the one made for job ``name``, under the resourceVersion just
        read (a claim someone changed meanwhile is read again, at most three times)."""
        ns, rt = self.settings.namespace, self._rt
        for _ in range(3):
            try:
                meta = (await gateway.read_pvc(self.api, ns, claim, request_timeout=rt))["metadata"]
                if not _of_job(meta, name):
                    return
                await gateway.delete_pvc(
                    self.api,
                    ns,
                    claim,
                    uid=meta["uid"],
                    resource_version=meta["resourceVersion"],
                    request_timeout=rt,
                )
                return
            except NotFound:
                return  # the garbage collector (its ownerReference to the Job) got there first
            except Conflict:
                continue
        log.error("Job %s: its code claim %s kept changing; not deleted (delete it by hand)", name, claim)
