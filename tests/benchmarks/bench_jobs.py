"""Jobs benchmark (issue 17): submit → running through gpuworkspace-jobs against ``kubectl create`` of the
same queued Job, Kubernetes API requests per job, and Kueue's admission of 1,000 pending workloads.

Run as a script (``make bench`` or ``python -m tests.benchmarks.bench_jobs``); no thresholds, it prints.

One devcluster (``--auth``: the request log names who asked), one JupyterHub with GPUWorkspaceSpawner, and
the jobs service started as tests/e2e/test_jobs.py's ``jobs`` fixture starts it, but with a ServiceAccount
token of its own (``system:serviceaccount:jhub:gpuworkspace-jobs``, its production identity), so its
requests are told apart from the hub's. Kueue objects of the benchmark's own (``jobs_cluster.py``): a
flavor for the simulated H100 nodes, ClusterQueue+LocalQueue ``bench-jobs`` (4 GPUs) and
``bench-admission`` (no GPU quota at first); a JobProfile ``bench-job-1gpu`` (one whole GPU) added to a
copy of ``hub_config/catalog``.

1. Submit → running. alice's workspace (cpu-small, started once to write a script that sleeps, then
   stopped: its home disk stays) is submitted from. ``api``: ``POST /api/v1/jobs`` with her own hub
   token (the service snapshots the home disk, restores it as the job's claim, creates the suspended
   Job), then the Job's pods are listed every 50 ms until one is ``Running`` (its process started: Kueue
   admitted it, the Job controller made the pod, it was scheduled and started). ``kubectl``: ``kubectl
   create -f -`` of the Job the service built in a first, uncounted submission (read back from the watch
   history as it was created: suspended, queue label; the server-generated selector dropped), its code
   claim a copy restored before the timer from a snapshot of the same disk; then the same polling.
   ``direct``: the same Job POSTed straight to the API server from here (no kubectl process start).
   A first cycle of api and kubectl is not counted; then N cycles each, interleaved (api, kubectl,
   direct, api, ...). After each, the job is cancelled (``DELETE /api/v1/jobs/{name}``, ``kubectl
   delete job``, or a DELETE) and its pods waited for. The headline is the ratio of the p50s, api /
   kubectl; ``answer`` is the time until the POST (or kubectl create) returned.
2. Requests per job: the jobs service's own Kubernetes API requests (request log, by its user) for the
   submit, one ``GET /api/v1/jobs/{name}`` while it runs, and the cancel, by verb and resource; against
   kubectl's for its create and delete. And the store writes of a whole cycle (the cluster-wide
   resourceVersion's rise, every writer: the service, Kueue, the Job controller, the kubelet, the CSI
   simulation), by resource for the last cycle of each.
3. Admission: ``--pending`` Jobs (default 1,000) of one GPU each, created by 8 clients in the LocalQueue
   ``bench-admission`` whose ClusterQueue has no GPU quota, until its status counts them all pending;
   then its GPU quota is raised to Q (``--quota``, default 8) and the time is taken until its status
   counts Q admitted (the quota is full) and until Q Jobs have pods (unsuspended by Kueue). Kueue runs
   inside the devcluster process, so the request log sees none of its writes: they are counted as
   resourceVersion bumps per resource (the watch history replayed from before the change). CPU time
   of the devcluster process (its API server and in-process controllers: Kueue, the Job controller,
   the scheduler; not the pods, separate processes) per phase, from ``/proc``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.benchmarks import jobs_cluster as jc
from tests.benchmarks import report as bench_report
from tests.benchmarks.bench_spawn import pct
from tests.benchmarks.jobs_admission import QUEUE as ADMISSION_QUEUE
from tests.benchmarks.jobs_admission import Admission, admission, print_admission
from tests.e2e.harness import BIN, REPO, Devcluster, Hub, OidcMock, Proc, free_port, http, wait_for
from tests.e2e.test_disk_admin import call, user_token
from tests.e2e.test_workspace_lifecycle import write_file

NS = jc.NS
SA_USER = "system:serviceaccount:jhub:gpuworkspace-jobs"
PREFIX = "/services/gpuworkspace-jobs/"
USER, SERVER, SCRIPT = "alice", "bench", "sleep.py"
QUEUES = {"bench-jobs": 4, ADMISSION_QUEUE: 0}
JOB_PROFILE = f"""\
apiVersion: gpuworkspace.dev/v1alpha1
kind: JobProfile
metadata:
  name: bench-job-1gpu
spec:
  displayName: "bench: a job on one whole GPU"
  image: {jc.IMAGE}
  resources:
    requests: {{cpu: 100m, memory: 256Mi, nvidia.com/gpu: "1"}}
    limits: {{cpu: "1", memory: 1Gi, nvidia.com/gpu: "1"}}
  queue: bench-jobs
  maxRuntime: 30m
  access:
    groups: [researchers]
  outputs:
    objectStore: {{url: "s3://bench-jobs/outputs/"}}
"""
LABEL_JOB = "gpuworkspace.dev/job"
PEER_SNAPSHOT, PEER_CLAIM = "bench-kubectl-code", "bench-kubectl-code"
SNAPSHOTS = f"/apis/snapshot.storage.k8s.io/v1/namespaces/{NS}/volumesnapshots"
JOBS = jc.JOBS


def kubectl(dc: Devcluster, *args: str, stdin: str | None = None) -> None:
    env = {**os.environ, "KUBECONFIG": str(dc.kubeconfig)}
    done = subprocess.run(
        ["kubectl", *args], env=env, input=stdin, text=True, capture_output=True, check=False
    )
    if done.returncode:
        raise RuntimeError(f"kubectl {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")


@dataclass
class Cycle:
    """One job's life: submit (or create) → running, then cancel → pods gone."""

    path: str  # "api" or "kubectl"
    name: str
    running_s: float
    cancel_s: float
    requests: dict[str, list[dict[str, Any]]]  # phase -> the requests of the submitter (service or kubectl)
    rv: tuple[int, int]  # the store's resourceVersion before and after
    answered_s: float = 0.0  # submit → the POST (or kubectl create) answered

    @property
    def writes(self) -> int:
        return self.rv[1] - self.rv[0]

    @property
    def request_count(self) -> int:
        return sum(len(v) for v in self.requests.values())


@dataclass
class Bench:
    dc: Devcluster
    base: str  # the jobs API's base URL
    token: str  # alice's hub token
    peer_job: dict[str, Any] = field(default_factory=dict)  # the Job as the service created it
    code_claim: str = ""  # the claim its pod mounts (renamed to PEER_CLAIM for kubectl)

    def kubectl(self, *args: str, stdin: str | None = None) -> None:
        kubectl(self.dc, "-n", NS, *args, stdin=stdin)

    def pods(self, job: str) -> list[dict[str, Any]]:
        path = f"/api/v1/namespaces/{NS}/pods?labelSelector=batch.kubernetes.io/job-name%3D{job}"
        return list(jc.get_json(self.dc, path)["items"])

    def wait_running(self, job: str) -> None:
        running = lambda: any((p.get("status") or {}).get("phase") == "Running" for p in self.pods(job))  # noqa: E731
        wait_for(running, 120, f"a Running pod of job {job}", self.dc.proc, interval_s=0.05)

    def wait_gone(self, job: str) -> None:
        wait_for(lambda: not self.pods(job), 120, f"job {job}'s pods gone", self.dc.proc, interval_s=0.05)

    def log(self, who: str) -> list[dict[str, Any]]:
        """The request log since it was last read (then cleared), of the service or of kubectl."""
        records = self.dc.requests_log()
        self.dc.requests_log(clear=True)
        if who == "kubectl":
            return [r for r in records if r["user_agent"].startswith("kubectl")]
        if who == "direct":
            return []  # this benchmark's own requests (1 create, 1 delete), which the log leaves out
        return [r for r in records if r["user"] == SA_USER]


def api_cycle(b: Bench) -> Cycle:
    rv0 = jc.store_rv(b.dc)
    b.dc.requests_log(clear=True)
    started = time.perf_counter()
    body = {"profile": "bench-job-1gpu", "script": SCRIPT, "server": SERVER}
    status, view = call(b.base, b.token, "POST", "/jobs", body)
    if status != 201:
        raise RuntimeError(f"POST /jobs answered {status}: {view}")
    name, answered = view["name"], time.perf_counter()
    b.wait_running(name)
    running = time.perf_counter()
    requests = {"submit": b.log("service")}
    status, view = call(b.base, b.token, "GET", f"/jobs/{name}")
    if status != 200 or view["state"] != "running":
        raise RuntimeError(f"GET /jobs/{name} answered {status}: {view}")
    requests["status"] = b.log("service")
    cancelling = time.perf_counter()
    status, answer = call(b.base, b.token, "DELETE", f"/jobs/{name}")
    if status != 200:
        raise RuntimeError(f"DELETE /jobs/{name} answered {status}: {answer}")
    b.wait_gone(name)
    gone = time.perf_counter()
    requests["cancel"] = b.log("service")
    rv = (rv0, jc.store_rv(b.dc))
    return Cycle("api", name, running - started, gone - cancelling, requests, rv, answered - started)


def peer_cycle(b: Bench, i: int, via: str) -> Cycle:
    """The service's Job created again (``via``: ``kubectl`` create, or a ``direct`` POST from here), run,
    deleted (``kubectl delete job``, or a DELETE with background propagation)."""
    name = f"bench-{via}-{i}"
    manifest = jc.job_as_created(b.peer_job, name, {b.code_claim: PEER_CLAIM}, {LABEL_JOB: name})
    rv0 = jc.store_rv(b.dc)
    b.dc.requests_log(clear=True)
    started = time.perf_counter()
    if via == "kubectl":
        b.kubectl("create", "-f", "-", stdin=json.dumps(manifest))
    else:
        jc.write(b.dc, "POST", JOBS, manifest)
    answered = time.perf_counter()
    b.wait_running(name)
    running = time.perf_counter()
    requests = {"submit": b.log(via)}
    cancelling = time.perf_counter()
    if via == "kubectl":
        b.kubectl("delete", "job", name)
    else:
        jc.write(b.dc, "DELETE", f"{JOBS}/{name}", {"propagationPolicy": "Background"})
    b.wait_gone(name)
    gone = time.perf_counter()
    requests["cancel"] = b.log(via)
    rv = (rv0, jc.store_rv(b.dc))
    return Cycle(via, name, running - started, gone - cancelling, requests, rv, answered - started)


def first_api_cycle(b: Bench) -> Cycle:
    """The uncounted first submission; it also gives the kubectl peer the service's Job, and a copy of
    its code (a snapshot of the same home disk, restored as a claim of its own)."""
    rv0 = jc.store_rv(b.dc)
    cycle = api_cycle(b)
    created = {
        kind: {
            e["object"]["metadata"]["name"]: e["object"]
            for e in jc.replay(b.dc, jc.RESOURCES[kind], rv0, cycle.rv[1])
            if e["type"] == "ADDED"
        }
        for kind in ("jobs", "volumesnapshots", "persistentvolumeclaims")
    }
    job = created["jobs"][cycle.name]
    annotations = job["metadata"]["annotations"]
    b.peer_job, b.code_claim = job, annotations["gpuworkspace.dev/code-claim"]
    snapshot = jc.as_created(
        created["volumesnapshots"][annotations["gpuworkspace.dev/code-snapshot"]], PEER_SNAPSHOT
    )
    jc.write(b.dc, "POST", SNAPSHOTS, snapshot)
    ready = lambda: (jc.get_json(b.dc, f"{SNAPSHOTS}/{PEER_SNAPSHOT}").get("status") or {}).get("readyToUse")  # noqa: E731
    wait_for(ready, 60, "the kubectl peer's snapshot ready", b.dc.proc)
    claim = jc.as_created(created["persistentvolumeclaims"][b.code_claim], PEER_CLAIM)
    for source in ("dataSource", "dataSourceRef"):
        if source in claim["spec"]:
            claim["spec"][source] = {**claim["spec"][source], "name": PEER_SNAPSHOT}
    jc.write(b.dc, "POST", f"/api/v1/namespaces/{NS}/persistentvolumeclaims", claim)
    return cycle


# ------------------------------------------------------------------------------------------ set-up
def start_jobs_service(dc: Devcluster, hub: Hub, catalog: Path, log_dir: Path) -> tuple[Proc, str]:
    """As tests/e2e/test_jobs.py's ``jobs`` fixture, with the service's own ServiceAccount kubeconfig."""
    port = free_port()
    env = {
        **os.environ,
        "KUBECONFIG": str(dc.service_account_kubeconfig("jhub", "gpuworkspace-jobs")),
        "JUPYTERHUB_API_URL": hub.api_url,
        "JUPYTERHUB_API_TOKEN": hub.admin_token,
        "JUPYTERHUB_SERVICE_NAME": "gpuworkspace-jobs",
        "JUPYTERHUB_SERVICE_PREFIX": PREFIX,
        "JUPYTERHUB_SERVICE_URL": f"http://127.0.0.1:{port}",
        "PYTHONUNBUFFERED": "1",
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("JUPYTERHUB_CLIENT_ID", None)
    argv = [sys.executable, "-m", "gpuworkspace_spawner.services.jobs.app", "--namespace", NS]
    argv += ["--catalog", str(catalog), "--timeout", "60"]
    proc = Proc("gpuworkspace-jobs", argv, log_dir / "jobs.log", env, cwd=REPO).start()
    base = f"http://127.0.0.1:{port}{PREFIX}api/v1"
    wait_for(lambda: http("GET", base + "/jobs")[0] == 403, 30, "the jobs service", proc)
    return proc, base


def prepare(dc: Devcluster, hub: Hub) -> None:
    """The Kueue objects; alice's workspace started once with the script, then stopped (the disk stays)."""
    objects = "\n---\n".join(json.dumps(o) for o in jc.kueue_objects(QUEUES))
    kubectl(dc, "apply", "-f", "-", stdin=objects)
    hub.start_server(USER, SERVER, {"profile": "cpu-small"})
    hub.wait_ready(USER, SERVER)
    write_file(hub, USER, SERVER, SCRIPT, "import time\ntime.sleep(3600)\n")  # type: ignore[arg-type]
    hub.stop_server(USER, SERVER)


# ------------------------------------------------------------------------------------------ output
def kinds(records: list[dict[str, Any]]) -> str:
    counts = Counter(f"{r['verb']} {r['resource']}" for r in records)
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none"


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def print_cycles(cycles: dict[str, list[Cycle]]) -> None:
    head = f"{'path':<8} {'n':>3} {'answer p50':>10} {'→running p50':>12} {'p95':>6} {'cancel p50':>10} {'requests':>8} {'store writes':>12}"
    print(f"\n{head}\n{'-' * len(head)}")
    for path, runs in cycles.items():
        times = [c.running_s for c in runs]
        print(
            f"{path:<8} {len(runs):>3} {median([c.answered_s for c in runs]):>9.2f}s {median(times):>11.2f}s {pct(times, 0.95):>5.2f}s "
            f"{median([c.cancel_s for c in runs]):>9.2f}s "
            f"{'-' if path == 'direct' else f'{median([c.request_count for c in runs]):.0f}':>8} "
            f"{median([c.writes for c in runs]):>12.0f}"
        )
    print("(answer: until the POST or kubectl create returned; →running: until the Job's pod ran)")
    print(
        "(requests: the submitter's own, median per cycle: the jobs service's, or kubectl's (direct: one create"
    )
    print(" and one delete by construction); store writes:")
    print(" the cluster-wide resourceVersion's rise over the cycle, every writer)")
    for path, runs in cycles.items():
        last = runs[-1]
        if path == "direct":
            continue
        print(f"\n{path}, requests of the last cycle ({last.name}):")
        for phase, records in last.requests.items():
            print(f"  {phase:<7} {len(records):>3}: {kinds(records)}")


def emit(cycles: dict[str, list[Cycle]], a: Admission | None) -> None:
    peer = "kubectl create of the same queued Job (the one the service built), same devcluster, interleaved"

    direct = "a POST of the same Job straight to the API server (no kubectl process), same run"

    def pair(
        figure: str, of: Callable[[Cycle], float], unit: str = "", q: float = 0.5, via: str = "kubectl"
    ) -> bench_report.Row:
        api, other = ([of(c) for c in cycles[p]] for p in ("api", via))
        at = median if q == 0.5 else (lambda v: pct(v, q))
        name = peer if via == "kubectl" else direct
        return bench_report.Row("bench_jobs", figure, at(api), at(other), unit, peer_name=name)

    rows = [
        pair(f"submit → running p50 (n={len(cycles['api'])})", lambda c: c.running_s, "s"),
        pair("submit → running p95", lambda c: c.running_s, "s", 0.95),
        pair("submit → running p50, against a direct POST", lambda c: c.running_s, "s", via="direct"),
        pair("submit answered p50 (the POST; kubectl create)", lambda c: c.answered_s, "s"),
        pair(
            "API requests per job (submit + status + cancel; kubectl: create + delete)",
            lambda c: c.request_count,
        ),
        pair("store writes per job cycle (all writers)", lambda c: c.writes),
    ]
    if a is not None:
        what = f"{a.pending:,} pending, quota {a.quota} GPUs"
        rows += [
            bench_report.Row(
                "bench_jobs", f"admission ({what}): until the quota is full", a.full_s, unit="s"
            ),
            bench_report.Row("bench_jobs", f"admission: until {a.quota} Jobs have pods", a.pods_s, unit="s"),
            bench_report.Row("bench_jobs", "admission: store writes (resourceVersion bumps)", a.total_writes),
            bench_report.Row("bench_jobs", "admission: writes in the API request log", a.logged_writes),
            bench_report.Row("bench_jobs", "admission: devcluster CPU", a.admit_cpu_s, unit="s"),
            bench_report.Row(
                "bench_jobs", f"queueing {a.pending:,} Jobs: until all pending", a.queued_s, unit="s"
            ),
        ]
    bench_report.emit(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_jobs", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cycles", type=int, default=5, help="measured cycles per path (default: 5)")
    parser.add_argument(
        "--pending", type=int, default=1000, help="queued Jobs for the admission (default: 1000; 0 skips it)"
    )
    parser.add_argument("--quota", type=int, default=8, help="GPU quota the admission fills (default: 8)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (state and logs)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="gpuws-bench-jobs-"))
    catalog, logs = workdir / "catalog", workdir / "logs"
    shutil.copytree(REPO / "hub_config" / "catalog", catalog)
    (catalog / "zz-bench.yaml").write_text(JOB_PROFILE)
    dc = Devcluster(workdir / "devcluster", logs, service_accounts=(("jhub", "gpuworkspace-jobs"),))
    # tokens required: the request log's user tells the service's requests from the hub's
    dc.proc.argv.append("--auth")
    oidc = OidcMock(logs)
    hub = Hub(workdir / "hub", dc, oidc, spawner="gpuworkspace", catalog=catalog)
    service: Proc | None = None
    cycles: dict[str, list[Cycle]] = {"api": [], "kubectl": [], "direct": []}
    adm, failed = None, ""
    try:
        dc.start()
        oidc.start()
        hub.start()
        prepare(dc, hub)
        service, base = start_jobs_service(dc, hub, catalog, logs)
        b = Bench(dc, base, user_token(hub, USER))  # type: ignore[arg-type]
        first = first_api_cycle(b)
        warm = peer_cycle(b, 0, "kubectl")
        print(
            f"  .. first cycles (not counted): api {first.running_s:.2f} s, kubectl {warm.running_s:.2f} s",
            flush=True,
        )
        for i in range(1, args.cycles + 1):
            for c in (api_cycle(b), peer_cycle(b, i, "kubectl"), peer_cycle(b, i, "direct")):
                cycles[c.path].append(c)
                print(
                    f"  .. {c.path:<7} cycle {i}/{args.cycles}: running after {c.running_s:5.2f} s, {c.request_count} requests, {c.writes} store writes",
                    flush=True,
                )
        last = {p: runs[-1] for p, runs in cycles.items()}
        by_resource = {p: jc.writes_by_resource(dc, *c.rv) for p, c in last.items()}
        if args.pending:
            try:
                adm = admission(dc, args.pending, args.quota)
            except (RuntimeError, TimeoutError) as exc:  # the cycles' figures still count
                failed = f"admission: {exc}"
                print(f"bench_jobs: {failed}\n{dc.proc.tail(30)}", file=sys.stderr)
    except Exception:
        for proc in (dc.proc, hub.proc, *([service] if service else [])):
            print(f"\n----- {proc.log_path}\n{proc.tail(30)}", file=sys.stderr)
        raise
    finally:
        if service is not None:
            service.stop()
        hub.stop()
        oidc.stop()
        dc.stop()
        if args.keep:
            print(f"bench_jobs: work directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print_cycles(cycles)
    for path, counts in by_resource.items():
        rest = cycles[path][-1].writes - sum(counts.values())
        print(
            f"{path}, store writes of the last cycle by resource: "
            + ", ".join(f"{n} {k}" for k, n in counts.most_common())
            + f" (other types: {rest})"
        )
    ratio = median([c.running_s for c in cycles["api"]]) / median([c.running_s for c in cycles["kubectl"]])
    print(f"\nsubmit → running, jobs API / kubectl create   x{ratio:.2f}")
    if adm is not None:
        print_admission(adm)
    emit(cycles, adm)
    print(f"\ntotal wall time {time.perf_counter() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
