"""jupyter-scheduler's backend for GPU workspaces: "Create Notebook Job" hands the notebook to the
cluster's queue (Kueue) through the gpuworkspace-jobs API, instead of running it in the workspace.

Set up in the single-user server (the demo's hub_config passes these as its arguments)::

    --SchedulerApp.scheduler_class=gpuworkspace_spawner.scheduler.backend.GPUWorkspaceScheduler
    --SchedulerApp.environment_manager_class=gpuworkspace_spawner.scheduler.backend.JobProfiles
    --SchedulerApp.job_files_manager_class=gpuworkspace_spawner.scheduler.backend.JobOutputs

with ``$GPUWS_JOBS_URL`` (the API's ``.../api/v1``) and the server's own ``$JUPYTERHUB_API_TOKEN``.
User guide: docs/how-to/notebook-jobs.md. Recurring job definitions are refused (:data:`NO_RECURRING`).
"""

from __future__ import annotations

import json
import logging
import os
import time
from http import HTTPStatus
from typing import Any

from jupyter_core.paths import jupyter_data_dir
from jupyter_scheduler.environments import EnvironmentManager, EnvironmentRetrievalError
from jupyter_scheduler.exceptions import SchedulerError
from jupyter_scheduler.executors import ExecutionManager
from jupyter_scheduler.job_files_manager import JobFilesManager
from jupyter_scheduler.models import (
    CountJobsQuery,
    CreateJob,
    CreateJobDefinition,
    CreateJobFromDefinition,
    DescribeJob,
    DescribeJobDefinition,
    JobFeature,
    ListJobDefinitionsQuery,
    ListJobDefinitionsResponse,
    ListJobsQuery,
    ListJobsResponse,
    RuntimeEnvironment,
    Status,
    UpdateJob,
    UpdateJobDefinition,
)
from jupyter_scheduler.scheduler import BaseScheduler
from traitlets import Unicode, default

from . import mapping
from .client import JobsApiError, JobsClient
from .ledger import Ledger

log = logging.getLogger("gpuworkspace.scheduler")
NO_RECURRING = (
    "Recurring notebook jobs (Run on a schedule) are not available: each job goes through the cluster's"
    " queue when you submit it. Choose 'Run now'."
)


class QueueExecution(ExecutionManager):
    """What the dialog offers: a name, parameters, stop and delete (the job runs on the cluster)."""

    def supported_features(cls) -> dict[JobFeature, bool]:
        offered = {JobFeature.job_name, JobFeature.parameters, JobFeature.stop_job, JobFeature.delete_job}
        return {feature: feature in offered for feature in JobFeature}

    def execute(self) -> None:
        raise SchedulerError("notebook jobs run on the cluster, never in the workspace")

    def validate(cls, input_path: str) -> bool:
        return True


class JobProfiles(EnvironmentManager):
    """The dialog's environments: the job profiles the user may submit to (``GET api/v1/profiles``)."""

    async def list_environments(self) -> list[RuntimeEnvironment]:
        try:
            answer = await JobsClient.from_environment().call("GET", "profiles")
        except JobsApiError as exc:
            raise EnvironmentRetrievalError(exc.message) from None
        return [RuntimeEnvironment(**mapping.environment(p)) for p in (answer or {}).get("items") or []]

    def manage_environments_command(self) -> str:
        return ""

    def output_formats_mapping(self) -> dict[str, str]:
        return {mapping.OUTPUT_FORMAT: "Notebook"}


class JobOutputs(JobFilesManager):
    """Nothing to download: a job writes its executed notebook to its profile's output target, which the
    workspace mounts (the files are listed where they are) or an object-store prefix (named)."""

    async def copy_from_staging(self, job_id: str, redownload: bool | None = False) -> None:
        job = await self.scheduler.get_job(job_id)
        if job.downloaded:
            return
        output = next((f.file_path for f in job.job_files if f.file_format == mapping.OUTPUT_FORMAT), None)
        if output is None:
            raise SchedulerError(
                f"job {job_id}: {job.status_message or 'its results are not in this workspace'}"
            )


class GPUWorkspaceScheduler(BaseScheduler):
    """jupyter-scheduler's ``BaseScheduler`` on the gpuworkspace-jobs API."""

    task_runner = None  # no schedules run here (SchedulerApp starts a task runner if one is set)
    db_url = Unicode(help="jupyter-scheduler's database; unused: the jobs API holds the jobs")

    jobs_url = Unicode(
        config=True,
        help="The gpuworkspace-jobs API (its .../api/v1 URL). Default: $GPUWS_JOBS_URL.",
    )
    home_dir = Unicode(
        config=True,
        help="The home directory (the home disk a job gets a snapshot of). Default: $HOME.",
    )
    server_name = Unicode(
        config=True,
        help="This workspace's JupyterHub server name ('' for the default one). Default: $JUPYTERHUB_SERVER_NAME.",
    )
    ledger_path = Unicode(
        config=True,
        help="Where this server keeps job names, typed parameters and stopped jobs (a JSON file).",
    )

    @default("jobs_url")
    def _jobs_url(self) -> str:
        return os.environ.get("GPUWS_JOBS_URL", "")

    @default("home_dir")
    def _home_dir(self) -> str:
        return os.environ.get("HOME") or self.root_dir

    @default("server_name")
    def _server_name(self) -> str:
        return os.environ.get("JUPYTERHUB_SERVER_NAME", "")

    @default("ledger_path")
    def _ledger_path(self) -> str:
        return os.path.join(jupyter_data_dir(), "gpuworkspace-jobs.json")

    @default("execution_manager_class")
    def _execution_manager(self) -> type[ExecutionManager]:
        return QueueExecution

    # ------------------------------------------------------------------------ helpers
    @property
    def _client(self) -> JobsClient:
        return JobsClient.from_environment(url=self.jobs_url)

    @property
    def _ledger(self) -> Ledger:
        return Ledger(self.ledger_path)

    @property
    def _paths(self) -> mapping.Paths:
        return mapping.Paths(root_dir=os.path.abspath(self.root_dir), home_dir=os.path.abspath(self.home_dir))

    async def _described(self) -> list[dict[str, Any]]:
        """This user's jobs from the API, with what this server remembers, and the stopped ones."""
        answer = await self._client.call("GET", "jobs")
        user = os.environ.get("JUPYTERHUB_USER")
        views = [v for v in (answer or {}).get("items") or [] if not user or v.get("user") == user]
        ledger = self._ledger
        created, stopped = ledger.created(), ledger.stopped()
        jobs = [mapping.describe(v, self._paths, created.get(str(v.get("name")))) for v in views]
        known = {j["job_id"] for j in jobs}
        if forgotten := ledger.prune(known):  # the API's list is whole (no pages): the rest are gone
            log.info("Forgetting notebook jobs the jobs API no longer has: %s", ", ".join(forgotten))
        return jobs + [s for job_id, s in stopped.items() if job_id not in known]

    # ------------------------------------------------------------------------ jobs
    async def create_job(self, model: CreateJob) -> str:
        try:
            body = mapping.submission(json.loads(model.json()), self._paths, server=self.server_name)
        except mapping.Refused as exc:
            raise SchedulerError(exc.message) from None
        view = await self._client.call("POST", "jobs", body)
        job_id = str(view["name"])
        record = {"name": model.name, "parameters": model.parameters or {}, "create_time": _now_ms()}
        self._ledger.remember(job_id, record)
        log.info("Notebook job %s submitted: %s on %s", job_id, model.input_uri, body["profile"])
        return job_id

    async def get_job(self, job_id: str, job_files: bool | None = True) -> DescribeJob:
        ledger = self._ledger
        try:
            view = await self._client.call("GET", f"jobs/{job_id}")
        except JobsApiError as exc:
            kept = ledger.stopped().get(job_id)
            if exc.status == HTTPStatus.NOT_FOUND and kept is not None:
                return DescribeJob(**kept)
            raise
        return DescribeJob(**mapping.describe(view, self._paths, ledger.created().get(job_id)))

    async def list_jobs(self, query: ListJobsQuery) -> ListJobsResponse:
        try:
            page, total, token = mapping.select(await self._described(), json.loads(query.json()))
        except mapping.Refused as exc:
            raise SchedulerError(exc.message) from None
        return ListJobsResponse(jobs=[DescribeJob(**j) for j in page], total_count=total, next_token=token)

    async def count_jobs(self, query: CountJobsQuery) -> int:
        return sum(1 for j in await self._described() if j["status"] == str(query.status))

    async def update_job(self, job_id: str, model: UpdateJob) -> None:
        if model.status == Status.STOPPED:
            await self.stop_job(job_id)
        if model.compute_type:
            raise SchedulerError(
                "a job's profile is chosen when it is created; create a new job to change it"
            )
        if model.name:
            self._ledger.rename(job_id, model.name)

    async def stop_job(self, job_id: str) -> None:
        described = (await self.get_job(job_id)).dict()
        if described["status"] in (Status.COMPLETED, Status.FAILED, Status.STOPPED):
            raise SchedulerError(f"job {job_id} has already ended ({described['status']}): delete it instead")
        await self._cancel(job_id)
        self._ledger.stop(
            job_id, mapping.stopped(json.loads(DescribeJob(**described).json()), now_ms=_now_ms())
        )
        log.info("Notebook job %s stopped", job_id)

    async def delete_job(self, job_id: str) -> None:
        await self._cancel(job_id)
        self._ledger.forget(job_id)
        log.info("Notebook job %s deleted", job_id)

    async def _cancel(self, job_id: str) -> None:
        try:
            await self._client.call("DELETE", f"jobs/{job_id}")
        except JobsApiError as exc:
            if exc.status != HTTPStatus.NOT_FOUND:
                raise

    def get_staging_paths(self, model: Any) -> dict[str, str]:
        return {}  # the job writes its results to its profile's output target (JobOutputs)

    # ------------------------------------------------------------------------ job definitions
    def create_job_definition(self, model: CreateJobDefinition) -> str:
        raise SchedulerError(NO_RECURRING)

    def update_job_definition(self, job_definition_id: str, model: UpdateJobDefinition) -> None:
        raise SchedulerError(NO_RECURRING)

    def delete_job_definition(self, job_definition_id: str) -> None:
        raise SchedulerError(f"no job definition {job_definition_id}: {NO_RECURRING}")

    def get_job_definition(self, job_definition_id: str) -> DescribeJobDefinition:
        raise SchedulerError(f"no job definition {job_definition_id}: {NO_RECURRING}")

    def list_job_definitions(self, query: ListJobDefinitionsQuery) -> ListJobDefinitionsResponse:
        return ListJobDefinitionsResponse(job_definitions=[], total_count=0)

    def create_job_from_definition(self, job_definition_id: str, model: CreateJobFromDefinition) -> str:
        raise SchedulerError(NO_RECURRING)


def _now_ms() -> int:
    return int(time.time() * 1000)
