"""Least privilege, proven per identity (issues 8 and 14): the hub, authenticated as the ServiceAccount
``jhub/hub``, and each service that talks to Kubernetes, as its own ServiceAccount
(``jhub/gpuworkspace-disks``, ``-attribution``, ``-reclaimer``, ``-jobs``), against a devcluster that
enforces RBAC with exactly the rules of ``helm-values/extra-manifests/`` and z2jh's hub Role
(conftest.py), run every lifecycle path. Each rule counts only for the one ServiceAccount its Role is bound to.

- ``lifecycle_log`` drives the paths once (container start/stop/delete with the disk retained/re-adopt/
  reclaim, the fencing check's evidence path, VM start/stop/delete, the disk service's listing,
  metrics, resize, snapshot and restore, its reclaim of a VM root disk, the attribution API, a job
  submitted, listed, run by Kueue, its log read and cancelled through the jobs API) and keeps the
  requests of the five identities.
- Every request of each identity was allowed, and every rule was used by at least one request of its
  identity (a rule nothing used is a rule the code does not need).
- Every used rule alone allowed some request of its identity (no other rule of that identity did):
  removing it denies that request, so the "every request was allowed" check of the same run fails.
  Removal re-runs for representative rules (namespaced Role, ClusterRole, another API group, the jobs
  service's Jobs) show the denial happens live: without the rule, its path gets a 403 and does not
  complete (a refused job submission leaves nothing behind).

Rules and verbs the run does not use are strict xfails naming why (``NOT_USED``, ``GRANTS_NOT_USED``):
z2jh's hub Role (unused: nothing runs in jhub), and what the devcluster cannot show (CDI's
``datavolumes/source`` clone check). The simulated kubelets (HTTPS, certificates from the cluster CA)
authorize ``get nodes/metrics`` through the API like a real kubelet's SubjectAccessReview, and the
request log records it as the caller's request, so that rule is proven like the others. Not applied:
the agent's DaemonSet (the devcluster serves no apps/v1).
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.harness import HubStack, http, wait_for
from tests.e2e.test_disk_admin import call, user_token
from tests.e2e.test_workspace_lifecycle import write_file

from .conftest import kubectl
from .rules import USERS, Rule, all_rules, grants, sole_uses, uses

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(400)]

NS = "gpu-workspaces"
DISKS = "/services/gpuworkspace-disks/"
ATTRIBUTION = "/services/gpuworkspace-attribution/api/v1"
JOBS = "/services/gpuworkspace-jobs/"
RULES = all_rules()


def k(stack: HubStack, *args: str, input_text: str | None = None) -> str:
    return kubectl(stack.kubeconfig, "-n", NS, *args, input_text=input_text)


def get_json(stack: HubStack, *args: str) -> Any:
    return json.loads(k(stack, "get", *args, "-o", "json"))


def service(stack: HubStack, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    headers = {"Authorization": f"token {stack.admin_token}"}
    status, raw = http(method, stack.url + path, body, headers=headers, timeout=120)
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode(errors="replace")


def start(stack: HubStack, user: str, server: str, profile: str) -> None:
    stack.hub.start_server(user, server, {"profile": profile})
    stack.hub.wait_ready(user, server)


def remove(stack: HubStack, user: str, server: str) -> None:
    """Delete the server for good: the hub forgets it, the spawner retains its disk."""
    assert stack.hub.api("DELETE", f"/users/{user}/servers/{server}", {"remove": True})[0] in (202, 204)


def label(stack: HubStack, kind: str, name: str, key: str) -> str | None:
    return get_json(stack, kind, name)["metadata"]["labels"].get(key)  # type: ignore[no-any-return]


def identity_requests(stack: HubStack) -> list[dict[str, Any]]:
    """The requests of the hub's and the services' ServiceAccounts (not the test's own admin ones)."""
    return [r for r in stack.requests_log() if r["user"] in USERS]


def sim_node(stack: HubStack, node: str, action: str) -> None:
    status, body = stack.devcluster.control("/_devcluster/sim/node", {"node": node, "action": action})
    assert status == 200, body


def container_paths(stack: HubStack, user: str, server: str) -> None:
    claim = f"home-{user}--{server}"
    start(stack, user, server, "cpu-small")
    stack.hub.stop_server(user, server)
    # An unreachable node makes the next start gather the fencing check's full evidence (pods, VMIs,
    # nodes, NetworkFences); the disk's node is fine, so it passes.
    sim_node(stack, "gpu-node-b", "not-ready")
    try:
        start(stack, user, server, "cpu-small")
    finally:
        sim_node(stack, "gpu-node-b", "recover")
    stack.hub.stop_server(user, server)
    remove(stack, user, server)
    wait_for(lambda: label(stack, "pvc", claim, "gpuworkspace.dev/disk-state") == "retained", 30, "retained")
    start(stack, user, server, "cpu-small")  # re-adopted
    assert label(stack, "pvc", claim, "gpuworkspace.dev/disk-state") == "active"
    disk_service_paths(stack, user, server, claim)
    remove(stack, user, server)
    wait_for(lambda: label(stack, "pvc", claim, "gpuworkspace.dev/disk-state") == "retained", 30, "retained")
    k(stack, "annotate", "--overwrite", "pvc", claim, "gpuworkspace.dev/retain-until=2020-01-01T00:00:00Z")
    gone = lambda: claim not in k(stack, "get", "pvc", "-o", "name")  # noqa: E731
    wait_for(gone, 30, "the reclaimer to delete the disk")


def disk_service_paths(stack: HubStack, user: str, server: str, claim: str) -> None:
    """Listing (with the kubelets' volume stats), metrics, resize, snapshot, restore."""
    status, body = service(stack, "GET", DISKS + "api/v1/workspaces")
    assert status == 200 and any(i["disk"]["claim"] == claim for i in body["items"]), body
    assert service(stack, "GET", DISKS + "metrics")[0] == 200
    status, body = service(stack, "POST", DISKS + f"api/v1/disks/{claim}/resize", {"size": "12Gi"})
    assert status == 200 and body["result"] == "resized", body
    status, snap = service(stack, "POST", DISKS + f"api/v1/disks/{claim}/snapshots", {"name": f"{claim}-s"})
    assert status == 201 and snap["readyToUse"], snap
    assert service(stack, "GET", DISKS + f"api/v1/disks/{claim}/snapshots")[0] == 200
    scheduled_snapshots_pruned(stack, claim)
    stack.hub.stop_server(user, server)
    status, body = service(stack, "POST", DISKS + f"api/v1/disks/{claim}/restore", {"snapshot": snap["name"]})
    assert status == 200, body


def scheduled_snapshots_pruned(stack: HubStack, claim: str) -> None:
    """The snapshot worker's path: a schedule on the disk (as a profile's storage.home.snapshots stamps
    it, here every 10 s, keep 1) until it deletes a scheduled snapshot beyond the keep-count."""
    every, keep = "gpuworkspace.dev/snapshot-every", "gpuworkspace.dev/snapshot-keep"
    k(stack, "annotate", "--overwrite", "pvc", claim, f"{every}=10", f"{keep}=1")

    def pruned() -> bool:
        events = get_json(stack, "events")["items"]
        return any(
            e["reason"] == "WorkspaceDiskSnapshotPruned" and e["involvedObject"]["name"] == claim
            for e in events
        )

    try:
        wait_for(pruned, 60, "the snapshot worker to prune a scheduled snapshot")
    finally:
        k(stack, "annotate", "pvc", claim, f"{every}-", f"{keep}-")


def vm_paths(stack: HubStack, user: str, server: str) -> None:
    start(stack, user, server, "vm-workstation")
    stack.hub.stop_server(user, server)
    start(stack, user, server, "vm-workstation")
    stack.hub.stop_server(user, server)
    remove(stack, user, server)
    selector = f"gpuworkspace.dev/user={user}"
    wait_for(lambda: not get_json(stack, "vm", "-l", selector)["items"], 60, "the VM to be deleted")
    (disk,) = get_json(stack, "datavolume", "-l", selector)["items"]
    name = disk["metadata"]["name"]
    wait_for(lambda: label(stack, "datavolume", name, "gpuworkspace.dev/disk-state") == "retained", 30, "dv")
    k(
        stack,
        "annotate",
        "--overwrite",
        "datavolume",
        name,
        "gpuworkspace.dev/retain-until=2020-01-01T00:00:00Z",
    )
    gone = lambda: name not in k(stack, "get", "datavolume", "-o", "name")  # noqa: E731
    wait_for(gone, 30, "the reclaimer to delete the root disk")
    # a second VM server's retained root disk (CDI's claim carries the DataVolume's labels: it is listed),
    # deleted now through the disk service (its DataVolume)
    start(stack, user, f"{server}2", "vm-workstation")
    stack.hub.stop_server(user, f"{server}2")
    remove(stack, user, f"{server}2")
    wait_for(lambda: len(get_json(stack, "datavolume", "-l", selector)["items"]) == 1, 30, "the second disk")
    (second,) = get_json(stack, "datavolume", "-l", selector)["items"]
    root = second["metadata"]["name"]
    wait_for(lambda: label(stack, "datavolume", root, "gpuworkspace.dev/disk-state") == "retained", 30, "dv")
    status, body = service(stack, "GET", DISKS + "api/v1/workspaces")  # root disks list their VM and DV
    assert status == 200 and any(i["disk"]["claim"] == root for i in body["items"]), body
    status, body = service(stack, "POST", DISKS + f"api/v1/disks/{root}/reclaim", {})
    assert status == 200 and body["deleted"], body
    wait_for(lambda: root not in k(stack, "get", "datavolume", "-o", "name"), 30, "the root disk to go")


def attribution_paths(stack: HubStack) -> None:
    def collected() -> bool:
        status, body = service(stack, "GET", ATTRIBUTION + "/status")
        return status == 200 and body["cycles"] >= 2 and not body.get("failed_sources")

    wait_for(collected, 30, "two attribution cycles without a failed source")
    for path in ("/nodes", "/workspaces"):
        assert service(stack, "GET", ATTRIBUTION + path)[0] == 200


JOB_SCRIPT = "import time\nprint('job started', flush=True)\ntime.sleep(600)\n"
JOB_OWNED = "gpuworkspace.dev/kind=job"  # the Job, its code claim and snapshot


def job_objects(stack: HubStack) -> str:
    return k(stack, "get", "jobs,pvc,volumesnapshots", "-l", JOB_OWNED, "-o", "name")


_tokens: dict[str, str] = {}


def bob(stack: HubStack, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """The jobs API with bob's own token (a job runs as the user who submits it; bob is in gpu-users,
    the shipped job profiles' group)."""
    token = _tokens.get(stack.url) or _tokens.setdefault(stack.url, user_token(stack, "bob"))
    return call(stack.url + JOBS + "api/v1", token, method, path, body)


def submit_job(stack: HubStack) -> tuple[int, Any]:
    return bob(stack, "POST", "/jobs", {"profile": "train-1gpu", "script": "train.py", "server": "jobs"})


def jobs_paths(stack: HubStack) -> None:
    """Every path of the jobs service, as its own identity: bob submits a script from his workspace's
    home disk on the shipped 1-GPU job profile (snapshot, claim, Job, ownerReferences, audit), lists it,
    gets it running (Kueue's Workload), reads its log (its pod's) and cancels it (claim, snapshot, Job)."""
    start(stack, "bob", "jobs", "cpu-small")
    write_file(stack, "bob", "jobs", "train.py", JOB_SCRIPT)
    status, job = submit_job(stack)
    assert status == 201, job
    name = job["name"]
    status, listed = bob(stack, "GET", "/jobs")
    assert status == 200 and [j["name"] for j in listed["items"]] == [name], listed
    running = lambda: (bob(stack, "GET", f"/jobs/{name}")[1] or {}).get("reason") == "running"  # noqa: E731
    wait_for(running, 90, "the job running")
    wait_for(lambda: "job started" in str(bob(stack, "GET", f"/jobs/{name}/logs")[1]), 30, "the job's log")
    status, cancelled = bob(stack, "DELETE", f"/jobs/{name}")
    assert status == 200 and cancelled["was"] == "running", cancelled
    wait_for(lambda: not job_objects(stack), 30, "the job, its claim and its snapshot gone")
    stack.hub.stop_server("bob", "jobs")


@pytest.fixture(scope="module")
def lifecycle_log(rbac_stack: HubStack) -> Iterator[list[dict[str, Any]]]:
    t0 = time.monotonic()
    try:
        container_paths(rbac_stack, "alice", "ws")
        vm_paths(rbac_stack, "bob", "vm")
        attribution_paths(rbac_stack)
        jobs_paths(rbac_stack)
    except BaseException:
        rbac_stack.dump_logs()
        raise
    # A watch is logged when it ends: stop the hub (and so its services) to close theirs, then start it
    # again for the removal checks.
    rbac_stack.hub.stop()
    time.sleep(6)  # the devcluster notices a dropped watch at its next write (bookmarks every 5 s)
    records = identity_requests(rbac_stack)
    rbac_stack.hub.start()
    counts = {user: sum(1 for r in records if r["user"] == user) for user in USERS}
    print(f"lifecycle: {counts} requests in {time.monotonic() - t0:.1f}s")
    yield records


@pytest.mark.parametrize("user", USERS)
def test_every_request_of_each_identity_was_allowed(user: str, lifecycle_log: list[dict[str, Any]]) -> None:
    """Each ServiceAccount made requests (so each process really ran as its own identity) and none was
    denied: a service still using the hub's identity would show up as the hub, denied its rules."""
    mine = [r for r in lifecycle_log if r["user"] == user]
    denied = sorted({(r["verb"], r["resource"], r["namespace"]) for r in mine if r["status"] in (401, 403)})
    assert mine and denied == []


# Rules no request of the run matches, each with why (findings for the lead: see the module docstring).
DEVCLUSTER_CANNOT_SHOW = "the devcluster cannot show it is needed: "
NOT_USED: dict[str, str] = {
    "vm/clone-source-rbac.yaml:Role/vm-images/gpuworkspace-clone-source#0:datavolumes/source": (
        DEVCLUSTER_CANNOT_SHOW + "its CDI clones across namespaces without CDI's admission check "
        "(sim/cdi.py: the clone RBAC is not modelled), so nothing asks for datavolumes/source"
    ),
    "z2jh-hub-role.yaml:Role/jhub/hub#0:pods,persistentvolumeclaims,secrets,services": (
        "z2jh's hub Role grants these in the release namespace jhub, where the spawner and its "
        "services never work (KubeSpawner.namespace and every --namespace is gpu-workspaces)"
    ),
    "z2jh-hub-role.yaml:Role/jhub/hub#1:events": (
        "z2jh's hub Role: events in jhub; the event reflector and audit events are in gpu-workspaces"
    ),
}
# Verbs the run uses only when timing makes the code need them.
GRANTS_USED_BY_TIMING: dict[tuple[str, str, str], str] = {
    ("watch", "snapshot.storage.k8s.io", "volumesnapshots"): "the jobs service's storage.wait_for_snapshot "
    "watches only when its first read finds the snapshot not ready yet; the simulated CSI is usually faster "
    "(the disk service's snapshot worker always watches them)",
}
# Verbs of used rules that no request of the run used, each with the path that needs it.
GRANTS_NOT_USED: dict[tuple[str, str, str], str] = {
    ("get", "", "pods"): "KubeSpawner reads a pod only after a create answered 409 (a pod left over "
    "with the same name); the run never collides",
    ("update", "kubevirt.io", "virtualmachines"): "runtimes.vm._ensure_vm replaces a VM whose spec no "
    "longer matches its profile (or its root disk); not driven here (test_vm_workspace.py does)",
}


def _param(rule: Rule) -> Any:
    marks = [pytest.mark.xfail(strict=True, reason=NOT_USED[rule.id])] if rule.id in NOT_USED else []
    return pytest.param(rule, id=rule.id, marks=marks)


@pytest.mark.parametrize("rule", [_param(r) for r in RULES])
def test_every_rule_is_used(rule: Rule, lifecycle_log: list[dict[str, Any]]) -> None:
    counts = uses(rule, lifecycle_log)
    print(rule.id, {" ".join(g): n for g, n in counts.items()})
    assert any(counts.values()), f"no request of the run needed {rule.id}: {grants(rule)}"


@pytest.mark.parametrize("rule", [_param(r) for r in RULES])
def test_every_rule_alone_allows_some_request(rule: Rule, lifecycle_log: list[dict[str, Any]]) -> None:
    """Removing the rule makes a test fail: some request of the run was allowed by it and by no other
    rule of its identity, so without it that request is denied and "every request was allowed" fails (the live
    removals below show that happen for three rules). A rule another rule duplicates fails here."""
    assert sole_uses(rule, RULES, lifecycle_log) > 0, f"{rule.id}: every request it allowed, another allowed"


def _grant_params() -> list[Any]:
    params = []
    for rule in RULES:
        if rule.id in NOT_USED:
            continue
        for grant in grants(rule):
            marks = []
            if grant in GRANTS_NOT_USED:
                marks = [pytest.mark.xfail(strict=True, reason=GRANTS_NOT_USED[grant])]
            elif grant in GRANTS_USED_BY_TIMING:  # not strict: whether the run needs it is a race
                marks = [pytest.mark.xfail(strict=False, reason=GRANTS_USED_BY_TIMING[grant])]
            params.append(pytest.param(rule, grant, id=f"{rule.id}:{grant[0]}", marks=marks))
    return params


@pytest.mark.parametrize(("rule", "grant"), _grant_params())
def test_every_verb_of_a_used_rule_is_used(
    rule: Rule, grant: tuple[str, str, str], lifecycle_log: list[dict[str, Any]]
) -> None:
    assert uses(rule, lifecycle_log)[grant] > 0, f"{rule.id}: no request used {' '.join(grant)}"


# ----------------------------------------------------------------------------- rule removal
def _without_rule(stack: HubStack, rule: Rule) -> dict[str, Any]:
    """Replace the live Role/ClusterRole by one without ``rule``; returns the original to restore."""
    scope = ["-n", rule.namespace] if rule.namespace else []
    kind = rule.kind.lower()
    live = json.loads(kubectl(stack.kubeconfig, *scope, "get", kind, rule.role, "-o", "json"))
    changed = {**live, "rules": [r for i, r in enumerate(live["rules"]) if i != rule.index]}
    kubectl(stack.kubeconfig, "replace", "-f", "-", input_text=json.dumps(changed))
    return live


def _restore(stack: HubStack, original: dict[str, Any]) -> None:
    meta = {k: v for k, v in original["metadata"].items() if k != "resourceVersion"}
    kubectl(stack.kubeconfig, "replace", "-f", "-", input_text=json.dumps({**original, "metadata": meta}))


def _rule(rule_id: str) -> Rule:
    return next(r for r in RULES if r.id == rule_id)


_calls = itertools.count(1)


def _resize(stack: HubStack, claim: str) -> bool:
    size = f"{10 + next(_calls)}Gi"  # always a growth
    status, body = service(stack, "POST", DISKS + f"api/v1/disks/{claim}/resize", {"size": size})
    return status == 200 and body["result"] in ("resized", "pending-restart")  # stopped: grows at start


def _snapshot(stack: HubStack, claim: str) -> bool:
    name = f"{claim}-{next(_calls)}"
    return service(stack, "POST", DISKS + f"api/v1/disks/{claim}/snapshots", {"name": name})[0] == 201


def _start_new(stack: HubStack, claim: str) -> bool:
    """Start a workspace whose home disk does not exist yet (so it must be created)."""
    user = f"new{next(_calls)}"
    try:
        stack.hub.start_server(user, "ws", {"profile": "cpu-small"})  # a refusal raises RuntimeError
        stack.hub.wait_ready(user, "ws", timeout_s=30)
    except (RuntimeError, TimeoutError):
        return False
    stack.hub.stop_server(user, "ws")
    return True


def _submit(stack: HubStack, claim: str) -> bool:
    """Submit bob's script (his stopped workspace's home disk keeps it) and cancel it; a submission
    that fails leaves nothing behind (the undo deleted the snapshot and claim it had made)."""
    status, job = submit_job(stack)
    if status != 201:  # what it had made is deleted (a claim may still be finishing its deletion)
        wait_for(lambda: not job_objects(stack), 15, "nothing left of a failed submission")
        return False
    assert bob(stack, "DELETE", f"/jobs/{job['name']}")[0] == 200
    wait_for(lambda: not job_objects(stack), 30, "the cancelled job's objects gone")
    return True


# Representative rules: a namespaced Role's core rule (the hub's), a ClusterRole's rule and another API
# group's rule (the disk service's), and the jobs service's Jobs (its submission undone when refused);
# each with the smallest path that needs it and the request of that identity that must then be denied.
REMOVALS = [
    pytest.param(
        "10-hub-rbac.yaml:Role/gpu-workspaces/gpuworkspace-hub#1:persistentvolumeclaims",
        _start_new,
        # the home-claim watch (read by the disk limits, limiting.py) is already running with its cache: the
        # start's own create of the new home claim is the request denied
        ("create", "persistentvolumeclaims"),
        id="pvcs-start",
    ),
    pytest.param(
        "60-gpuworkspace-disks.yaml:ClusterRole/gpuworkspace-disks#2:storageclasses",
        _resize,
        ("get", "storageclasses"),
        id="storageclasses-resize",
    ),
    pytest.param(
        "60-gpuworkspace-disks.yaml:Role/gpu-workspaces/gpuworkspace-disks#6:volumesnapshots",
        _snapshot,
        ("create", "volumesnapshots"),
        id="volumesnapshots-snapshot",
    ),
    pytest.param(
        "63-gpuworkspace-jobs.yaml:Role/gpu-workspaces/gpuworkspace-jobs#0:jobs",
        _submit,
        # the snapshot and the claim are made first, then the Job is refused: both are undone
        ("create", "jobs"),
        id="jobs-submit",
    ),
]


@pytest.fixture(scope="module")
def probe_claim(rbac_stack: HubStack, lifecycle_log: list[dict[str, Any]]) -> Iterator[str]:
    """A stopped workspace's home disk for the probes (after the full run, so it does not mix in)."""
    start(rbac_stack, "probe", "ws", "cpu-small")
    rbac_stack.hub.stop_server("probe", "ws")
    yield "home-probe--ws"


@pytest.mark.parametrize(("rule_id", "probe", "denied"), REMOVALS)
def test_removing_a_rule_breaks_its_path(
    rbac_stack: HubStack, probe_claim: str, rule_id: str, probe: Any, denied: tuple[str, str]
) -> None:
    rule = _rule(rule_id)
    assert probe(rbac_stack, probe_claim), "the probe must work with every rule in place"
    rbac_stack.requests_log(clear=True)
    original = _without_rule(rbac_stack, rule)
    try:
        worked = probe(rbac_stack, probe_claim)
        log = [r for r in identity_requests(rbac_stack) if r["user"] == rule.user]
    finally:
        _restore(rbac_stack, original)
    forbidden = {(r["verb"], r["resource"]) for r in log if r["status"] == 403}
    assert (worked, denied in forbidden) == (False, True), (rule.id, forbidden)
    assert probe(rbac_stack, probe_claim), "the path works again once the rule is back"
