"""Disk limits: the decision table over disks built by the real builders, and the guard around a create."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from gpuworkspace_spawner import limiting
from gpuworkspace_spawner.compat import SpawnException
from gpuworkspace_spawner.lifecycle.limits import (
    DiskLimits,
    LimitVerdict,
    decide_new_disk,
    form_refusal,
    pending_disk,
    with_pending_disks,
)
from gpuworkspace_spawner.manifests.names import (
    DISK_HOME,
    DISK_ROOT,
    LABEL_DISK,
    LABEL_USER,
    WorkspaceIdentity,
    label_value,
)
from gpuworkspace_spawner.manifests.pvc import build_home_pvc, build_retain_patch
from gpuworkspace_spawner.manifests.vm import build_root_disk
from tests.unit.manifests.scenarios import CPU, context
from tests.unit.manifests.test_vm import vm_context

NS = "gpu-workspaces"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def home(user: str, server: str = "", *, retained: bool = False, deleting: bool = False) -> dict[str, Any]:
    identity = WorkspaceIdentity(user=user, server=server, namespace=NS)
    claim = build_home_pvc(context(CPU, identity, claim=f"home-{user}-{server or 'default'}"))
    if retained:
        patch = build_retain_patch(retain_until=NOW, now=NOW, why="server-deleted")["metadata"]
        claim["metadata"]["labels"].update(patch["labels"])
        claim["metadata"]["annotations"].update(patch["annotations"])
    if deleting:
        claim["metadata"]["deletionTimestamp"] = "2026-03-01T11:00:00Z"
    return claim


def root(user: str, server: str = "") -> dict[str, Any]:
    ws, names = vm_context(identity=WorkspaceIdentity(user=user, server=server, namespace=NS))
    return build_root_disk(ws, names)


def decide(
    disks: list[dict[str, Any]], disk_name: str, per_user: int = 0, total: int = 0, user: str = "alice"
) -> LimitVerdict:
    return decide_new_disk(
        disks,
        user=user,
        user_label=label_value(user),
        disk_name=disk_name,
        limits=DiskLimits(per_user=per_user, total=total),
    )


TWO_OF_ALICE = [home("alice", "a"), home("alice", "b", retained=True)]


@pytest.mark.parametrize(
    ("disks", "disk_name", "per_user", "total", "action", "limit"),
    [
        pytest.param([], "home-alice-c", 0, 0, "allow", "", id="no-limits"),
        pytest.param(TWO_OF_ALICE * 50, "home-alice-c", 0, 0, "allow", "", id="no-limits-many"),
        pytest.param(TWO_OF_ALICE[:1], "home-alice-c", 2, 0, "allow", "", id="below-per-user"),
        pytest.param(TWO_OF_ALICE, "home-alice-c", 2, 0, "refuse", "per-user", id="at-per-user"),
        pytest.param(
            [home("alice", "a"), home("alice", "b", retained=True), root("alice", "vm")],
            "home-alice-c",
            2,
            0,
            "refuse",
            "per-user",
            id="past-per-user",
        ),
        pytest.param(
            [home("alice", "a"), root("alice", "vm")],
            "home-alice-c",
            2,
            0,
            "refuse",
            "per-user",
            id="vm-root-counts",
        ),
        pytest.param(TWO_OF_ALICE, "home-alice-b", 2, 0, "allow", "", id="readopt-retained-at-limit"),
        pytest.param(TWO_OF_ALICE, "home-alice-a", 2, 2, "allow", "", id="reuse-at-both-limits"),
        pytest.param(
            [home("alice", "a"), root("alice", "vm")],
            root("alice", "vm")["metadata"]["name"],
            1,
            1,
            "allow",
            "",
            id="vm-restart-past-limits",
        ),
        pytest.param(
            [home("alice", "a"), home("alice", "b", deleting=True)],
            "home-alice-c",
            2,
            0,
            "allow",
            "",
            id="being-deleted-does-not-count",
        ),
        pytest.param(
            [home("bob", "a"), home("bob", "b")], "home-alice-c", 2, 0, "allow", "", id="others-disks"
        ),
        pytest.param(
            [home("bob", "a"), home("bob", "b")], "home-alice-c", 2, 2, "refuse", "total", id="at-total"
        ),
        pytest.param([home("bob", "a"), root("carol")], "home-alice-c", 0, 3, "allow", "", id="below-total"),
        pytest.param(TWO_OF_ALICE, "home-alice-c", 2, 2, "refuse", "per-user", id="both-per-user-first"),
        pytest.param(
            [{"metadata": {"name": "scratch", "labels": {}}}] * 5,
            "home-alice-c",
            1,
            1,
            "allow",
            "",
            id="unlabelled-claims-ignored",
        ),
    ],
)
def test_decide_new_disk(
    disks: list[dict[str, Any]], disk_name: str, per_user: int, total: int, action: str, limit: str
) -> None:
    verdict = decide(disks, disk_name, per_user, total)
    assert (verdict.action, verdict.limit) == (action, limit), verdict.reason


def test_refusal_says_which_limit_how_many_and_what_to_do() -> None:
    verdict = decide([*TWO_OF_ALICE, root("alice", "vm")], "home-alice-c", per_user=2)
    assert verdict.user_disks == 3
    assert verdict.reason.startswith("You already have 3 workspace disks, the most one user may keep (2)")
    for words in ("server 'a' (in use)", "server 'b' (retained until 2026-03-01T12:00:00Z)", "server 'vm'"):
        assert words in verdict.reason
    assert "re-adopts its retained disk" in verdict.reason and "administrator" in verdict.reason

    total = decide([home("bob", "a"), home("bob", "b")], "home-alice-c", total=2)
    assert total.reason.startswith("This hub already holds 2 workspace disks, the most it allows (2)")
    assert "bob" not in total.reason, "another user's disks are not named"
    assert "You have 0 disks." in total.reason


def test_owner_is_the_exact_name_not_a_colliding_label() -> None:
    """``alice@example.com``'s label value could be another user's name: the annotation decides."""
    other = home("alice@example.com", "a")
    lookalike = label_value("alice@example.com")
    assert other["metadata"]["labels"][LABEL_USER] == lookalike
    verdict = decide([other], "home-x", per_user=1, user=lookalike)
    assert (verdict.action, verdict.user_disks) == ("allow", 0)
    by_label = copy.deepcopy(other)
    del by_label["metadata"]["annotations"]  # a disk labelled by hand: the label is all there is
    assert decide([by_label], "home-x", per_user=1, user=lookalike).action == "refuse"


def test_a_long_list_is_cut() -> None:
    many = [home("alice", f"s{i}") for i in range(25)]
    reason = decide(many, "home-new", per_user=25).reason
    assert "and 15 more" in reason and len(reason) < 1000


def test_negative_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="max_disks_total must be 0"):
        DiskLimits(total=-1)


# ------------------------------------------------------------------------------ the guard
class FakeSpawner:
    namespace = NS
    api = object()
    k8s_api_request_timeout = 5
    reflectors: dict[str, Any] = {}  # noqa: RUF012 -- KubeSpawner's class-level watch caches: none here

    def _get_reflector_key(self, key: str) -> str:
        return key

    def __init__(self, per_user: int, total: int) -> None:
        self.max_disks_per_user, self.max_disks_total = per_user, total
        self._rejected = False
        self.records: list[tuple[str, ...]] = []
        self._ports = SimpleNamespace(watch=self._watch)  # SpawnerPorts.watch: KubeSpawner's _start_reflector

    def _identity(self) -> WorkspaceIdentity:
        return WorkspaceIdentity(user="alice", server="c", namespace=NS)

    def _log_record(self, *args: str) -> None:
        self.records.append(args)

    async def _watch(self, kind: str, reflector_class: Any, **kwargs: Any) -> Any:
        """KubeSpawner's reflectors: a watch cache shared by every server of the hub, kept by ``kind``."""
        self.reflectors = {**self.reflectors, kind: SimpleNamespace(resources={}, kwargs=kwargs)}
        return self.reflectors[kind]


def lists(disks: list[dict[str, Any]], listed: list[str]) -> dict[str, Any]:
    """API lists of home claims and root disks over ``disks``, each call noted in ``listed``."""

    def of(kind: str) -> Any:
        async def list_kind(*api_and_namespace: Any, request_timeout: float) -> list[dict[str, Any]]:
            namespace = api_and_namespace[-1]
            listed.append(f"{kind} in {namespace}")
            return [d for d in disks if d["metadata"]["labels"][LABEL_DISK] == kind]

        return list_kind

    return {"list_home_claims": of(DISK_HOME), "list_root_disks_if_served": of(DISK_ROOT)}


@pytest.fixture(autouse=True)
def _no_pending(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limiting, "_PENDING", {})  # each test starts a fresh hub process


async def test_guard_refuses_before_the_block_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    listed: list[str] = []
    for name, fake in lists(TWO_OF_ALICE, listed).items():
        monkeypatch.setattr(limiting, name, fake)
    spawner, created = FakeSpawner(per_user=2, total=0), []
    with pytest.raises(SpawnException) as refused:
        async with limiting.new_disk_guard(spawner, "PersistentVolumeClaim", "home-alice-c"):
            created.append("home-alice-c")
    assert created == [] and listed == [f"{DISK_HOME} in {NS}", f"{DISK_ROOT} in {NS}"]  # nothing watched
    # CDI answered: the root disks are watched from now on (as a VM start watches them), not listed again
    assert spawner.reflectors["datavolumes"].kwargs["labels"] == {LABEL_DISK: DISK_ROOT}
    listed.clear()
    with pytest.raises(SpawnException):
        async with limiting.new_disk_guard(spawner, "PersistentVolumeClaim", "home-alice-c"):
            created.append("home-alice-c")
    assert listed == [f"{DISK_HOME} in {NS}"]
    assert refused.value.status_code == 403 and refused.value.reason == "disk-limit"
    assert refused.value.message.startswith("You already have 2 workspace disks")
    assert spawner._rejected, "stop() must not clean up (write) after a refusal"
    assert spawner.records[0][:3] == ("disk-refused", "PersistentVolumeClaim", "home-alice-c")

    async with limiting.new_disk_guard(FakeSpawner(per_user=3, total=0), "DataVolume", "x"):
        created.append("x")
    assert created == ["x"]


async def test_without_cdi_the_guard_watches_no_data_volumes(monkeypatch: pytest.MonkeyPatch) -> None:
    listed: list[str] = []
    monkeypatch.setattr(limiting, "list_home_claims", lists(TWO_OF_ALICE, listed)["list_home_claims"])

    async def no_cdi(namespace: str, *, request_timeout: float) -> None:
        listed.append("datavolumes: 404")

    monkeypatch.setattr(limiting, "list_root_disks_if_served", no_cdi)
    spawner = FakeSpawner(per_user=3, total=0)
    for _ in range(2):
        async with limiting.new_disk_guard(spawner, "PersistentVolumeClaim", "home-alice-c"):
            pass
    assert "datavolumes" not in spawner.reflectors  # a watch of a kind the cluster does not serve fails
    assert listed.count("datavolumes: 404") == 2


class WatchingSpawner(FakeSpawner):
    """A hub whose runtimes watch home claims and root DataVolumes (caches that lag behind a create)."""

    def __init__(self, per_user: int, total: int, claims: list[dict[str, Any]]) -> None:
        super().__init__(per_user, total)
        cache = {f"{NS}/{d['metadata']['name']}": d for d in claims}
        self.reflectors = {
            "home-claims": SimpleNamespace(resources=cache),
            "datavolumes": SimpleNamespace(resources={}),
        }


async def test_guard_reads_the_watch_caches_and_counts_a_disk_they_do_not_show_yet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    listed: list[str] = []
    for name, fake in lists([], listed).items():
        monkeypatch.setattr(limiting, name, fake)
    spawner = WatchingSpawner(per_user=3, total=0, claims=list(TWO_OF_ALICE))
    async with limiting.new_disk_guard(spawner, "PersistentVolumeClaim", "home-alice-c"):
        pass  # created; the watch event has not arrived
    with pytest.raises(SpawnException) as refused:
        async with limiting.new_disk_guard(spawner, "DataVolume", "root-alice-d"):
            raise AssertionError("a fourth disk must not be created")
    assert refused.value.message.startswith("You already have 3 workspace disks")
    assert listed == []  # both kinds from the caches: no API request

    spawner.reflectors["home-claims"].resources[f"{NS}/home-alice-c"] = home("alice", "c")  # the event
    async with limiting.new_disk_guard(
        WatchingSpawner(4, 0, [*TWO_OF_ALICE, home("alice", "c")]), "DataVolume", "d"
    ):
        pass  # seen in the cache: counted once, not twice (3 of 4)


def test_a_created_disk_counts_until_seen_or_for_a_while() -> None:
    made = pending_disk("home-alice-c", DISK_HOME, "alice", "alice")
    pending = {"home-alice-c": (100.0, made)}
    disks, still = with_pending_disks([], pending, now=110.0, kept_s=60)
    assert disks == [made] and still == pending
    disks, still = with_pending_disks([home("alice", "c")], pending, now=110.0, kept_s=60)
    assert [d["metadata"]["name"] for d in disks] == ["home-alice-c"] and still == {}
    assert with_pending_disks([], pending, now=161.0, kept_s=60) == ([], {})
    assert (
        decide_new_disk(
            [made], user="alice", user_label="alice", disk_name="x", limits=DiskLimits(per_user=1)
        ).action
        == "refuse"
    )


async def test_guard_without_limits_lists_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    listed: list[str] = []
    for name, fake in lists([], listed).items():
        monkeypatch.setattr(limiting, name, fake)
    async with limiting.new_disk_guard(FakeSpawner(0, 0), "PersistentVolumeClaim", "home-alice-c"):
        pass
    assert listed == []


# ------------------------------------------------------------------------------ the spawn form
class FormSpawner(FakeSpawner):
    """What :func:`limiting.form_refusals` reads of a spawner rendering alice's form for server "c"."""

    pvc_name_template = "home-{username}-{servername}"

    def __init__(self, per_user: int, total: int) -> None:
        super().__init__(per_user, total)
        self.warnings: list[str] = []
        self.log = self

    def _expand_user_properties(self, template: str) -> str:
        return template.format(username="alice", servername="c")

    def warning(self, message: str, *args: Any) -> None:
        self.warnings.append(message % args)


def listing(disks: list[dict[str, Any]] | BaseException) -> Any:
    async def list_disks(api: Any, namespace: str, *, request_timeout: float) -> list[dict[str, Any]]:
        if isinstance(disks, BaseException):
            raise disks
        return disks

    return list_disks


async def test_the_form_says_which_runtimes_would_need_a_disk_past_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Server "c" already has its VM root disk: a VM profile reuses it; a container profile would need
    home-alice-c, one past alice's limit of 3, and its cards say so before the click."""
    monkeypatch.setattr(limiting, "list_disks", listing([*TWO_OF_ALICE, root("alice", "c")]))
    refusals = await limiting.form_refusals(FormSpawner(per_user=3, total=0))
    assert list(refusals) == ["container"]
    assert refusals["container"].startswith("this server has no disk yet and you already have 3 disks")
    assert await limiting.form_refusals(FormSpawner(per_user=4, total=0)) == {}

    monkeypatch.setattr(limiting, "list_disks", listing([*TWO_OF_ALICE, home("bob", "x"), home("bob", "y")]))
    refusals = await limiting.form_refusals(FormSpawner(per_user=0, total=4))
    assert set(refusals) == {"container", "vm"}
    assert "the hub already holds 4 disks, the most it allows (you have 2 disks)" in refusals["vm"]


async def test_the_form_renders_when_the_disks_cannot_be_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limiting, "list_disks", listing(TimeoutError("no answer in 5 s")))
    spawner = FormSpawner(per_user=1, total=0)
    assert await limiting.form_refusals(spawner) == {}
    assert "no disk-limit notice shown" in spawner.warnings[0]
    monkeypatch.setattr(limiting, "list_disks", listing(ValueError("a bug")))
    with pytest.raises(ValueError, match="a bug"):  # not hidden as "unavailable"
        await limiting.form_refusals(spawner)


async def test_the_form_without_limits_lists_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limiting, "list_disks", listing(AssertionError("no limit configured: no API call")))
    assert await limiting.form_refusals(FormSpawner(0, 0)) == {}


def test_form_refusal_is_empty_for_an_allowed_start() -> None:
    assert form_refusal(decide([], "home-alice-c", per_user=1)) == ""
