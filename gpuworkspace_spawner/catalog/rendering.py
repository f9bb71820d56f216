"""The catalog as KubeSpawner 7 ``profile_list`` entries, each with a card that says what the user gets.

KubeSpawner renders its form with a jinja2 environment that does not autoescape
(``kubespawner/templates/form.html``: ``{{ profile.display_name }}``, ``{{ profile.description }}``),
so ``display_name`` and ``description`` here are HTML: every piece of catalog text is escaped, and
so are ``{`` and ``}`` in case a custom form template renders the text again as a template.
The card uses inline elements only: KubeSpawner puts the description inside a ``<p>``.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlencode

from .model import Catalog, GpuMode, Ide, VmSpec, WorkspaceProfile
from .options import accessible_profiles, default_profile_for
from .units import format_duration, parse_quantity

IDE_NAMES: dict[Ide, str] = {"code-server": "VS Code (code-server)", "jupyterlab": "JupyterLab"}
_GPU_MODE_TEXT: dict[GpuMode, str] = {
    "exclusive": (
        "a whole GPU for you alone: all of its memory, and full memory and fault isolation from other "
        "users. Billed per card-hour while the workspace runs, busy or not."
    ),
    "mig": (
        "a MIG slice: a hardware partition of a GPU with its own memory and compute, isolated from "
        "other users' memory and faults. Billed per slice-hour while the workspace runs."
    ),
    "time-sliced": (
        "a time-sliced share of a GPU: you take turns with other users on the same card, with no "
        "memory or fault isolation (another user can use up its memory or crash it), and speed varies "
        'with their load. "1" means one shared access, not a whole card. Billed as one shared access.'
    ),
    "none": "no GPU; CPU only.",
}


def describe_gpu_mode(mode: GpuMode) -> str:
    """Plain words on what the GPU mode isolates and how it is billed (seed 001 §8)."""
    return _GPU_MODE_TEXT[mode]


def _text(value: object) -> str:
    """Catalog text made safe for HTML and for a second pass through a template engine."""
    return html.escape(str(value), quote=True).replace("{", "&#123;").replace("}", "&#125;")


def _line(label: str, body: str, *, detail: bool = False) -> str:
    """One line of the card; a ``detail`` line is shown for the selected profile only (spawn.html)."""
    extra = " gpuws-card-detail" if detail else ""
    return f'<span class="gpuws-card-line{extra}"><strong>{_text(label)}:</strong> {body}</span>'


def gpu_need(profile: WorkspaceProfile) -> tuple[str, int] | None:
    """The GPU resource one workspace of ``profile`` takes and how many (a VM: its passthrough cards)."""
    if profile.vm is not None:
        names = [gpu.device_name for gpu in profile.vm.gpus]
        return (names[0], names.count(names[0])) if names else None
    gpu = profile.resources.gpu
    if gpu is None:
        return None
    try:
        return gpu[0], max(1, int(parse_quantity(gpu[1])))
    except ValueError:
        return None


def availability_query(profile: WorkspaceProfile) -> str | None:
    """The attribution service's ``api/v1/availability`` query for ``profile`` (None: no GPU)."""
    need = gpu_need(profile)
    if need is None:
        return None
    pool = profile.placement.node_pool
    selector = sorted(pool.node_selector.items()) if pool is not None else []
    pairs = [("resource", need[0]), ("count", str(need[1])), *(("selector", f"{k}={v}") for k, v in selector)]
    return urlencode(pairs)


def _availability_line(profile: WorkspaceProfile) -> str | None:
    """An empty "Free now" line the spawn page's script fills from the attribution service."""
    query = availability_query(profile)
    if query is None:
        return None
    return (
        f'<span class="gpuws-card-line gpuws-availability" data-gpuws-availability="{_text(query)}" '
        'aria-live="polite" hidden><strong>Free now:</strong> <span class="gpuws-availability-text"></span>'
        "</span>"
    )


def _amount(profile: WorkspaceProfile, name: str, unit: str) -> str | None:
    request = profile.resources.requests.get(name)
    limit = profile.resources.limits.get(name)
    if request and limit and request != limit:
        return f"{_text(request)}{unit} guaranteed, up to {_text(limit)}{unit}"
    if request or limit:
        return f"{_text(request or limit)}{unit}"
    return None


def _resources(profile: WorkspaceProfile) -> str:
    parts = []
    cpu = _amount(profile, "cpu", " CPU")
    memory = _amount(profile, "memory", " memory")
    if cpu:
        parts.append(cpu)
    if memory:
        parts.append(memory)
    gpu = profile.resources.gpu
    if gpu is not None:
        parts.append(f"{_text(gpu[1])} &times; <code>{_text(gpu[0])}</code>")
    return "; ".join(parts) if parts else "the cluster's defaults"


def _kept(profile: WorkspaceProfile) -> str:
    home = profile.storage.home
    where = f"your home directory <code>{_text(home.mount_path)}</code> ({_text(home.size)})"
    retention = home.retention
    if retention is not None and not retention.keep_on_delete:
        return f"{where} survives stopping the workspace; deleting the server deletes it"
    if retention is not None and retention.days is not None:
        return (
            f"{where} survives stopping the workspace, and is kept {_text(f'{retention.days:g}')} "
            "day(s) after the server is deleted"
        )
    return f"{where} survives stopping the workspace and deleting the server, until the retention period ends"


def _snapshots(profile: WorkspaceProfile) -> str | None:
    schedule = profile.storage.home.snapshots
    if schedule is None:
        return None
    return (
        f"your home disk is snapshotted every {format_duration(schedule.every_s)}; the newest "
        f"{schedule.keep} are kept, and you can restore one yourself while the workspace is stopped"
    )


def _wiped(profile: WorkspaceProfile) -> str:
    scratch = profile.storage.scratch
    size = f" (up to {_text(scratch.size_limit)})" if scratch.size_limit else ""
    shm = f" ({_text(profile.storage.shm_size_limit)})" if profile.storage.shm_size_limit else ""
    return f"<code>{_text(scratch.mount_path)}</code>{size} and <code>/dev/shm</code>{shm} are emptied when the workspace stops"


def _shared(profile: WorkspaceProfile) -> str | None:
    mounts = [m for m in (profile.storage.datasets, profile.storage.models) if m is not None]
    parts = [f"{_text(m.name)} at <code>{_text(m.mount_path)}</code> (read-only)" for m in mounts]
    for team in profile.storage.team_directories:
        mode = "read-only" if team.read_only else "read-write, shared with your team"
        parts.append(f"team directory <code>{_text(team.mount_path)}</code> ({mode})")
    return "; ".join(parts) if parts else None


def _session(profile: WorkspaceProfile) -> str:
    session = profile.session
    parts = []
    if session.idle_timeout_s:
        parts.append(f"stops after {format_duration(session.idle_timeout_s)} idle")
    if session.max_duration_s:
        parts.append(f"at most {format_duration(session.max_duration_s)} per session")
    if session.warnings_s:
        times = " and ".join(format_duration(w) for w in session.warnings_s)
        parts.append(f"you are warned {times} before")
    return "; ".join(parts) if parts else "no automatic stop"


def _vm_lines(profile: WorkspaceProfile, vm: VmSpec) -> list[str]:
    """Runtime, GPU, resources, kept and wiped for a ``runtime: vm`` profile."""
    disk = _text(vm.root_disk_size)
    return [
        _line(
            "Runtime",
            "a whole Linux VM, with root inside it: everything you install (<code>/etc</code>, "
            f"<code>/opt</code>, <code>/usr/local</code>, apt) is kept on your root disk ({disk})",
            detail=True,
        ),
        _line("GPU", _vm_gpus(vm), detail=True),
        _line("Resources", _vm_resources(profile, vm)),
        _line(
            "Kept",
            f"the whole root disk ({disk}, home included) survives stopping the VM and deleting the "
            "server, until the retention period ends",
            detail=True,
        ),
        _line("Wiped", "memory and running programs: stopping the workspace shuts the VM down", detail=True),
    ]


def _vm_gpus(vm: VmSpec) -> str:
    if not vm.gpus:
        return _text(describe_gpu_mode("none"))
    counts: dict[str, int] = {}
    for gpu in vm.gpus:
        counts[gpu.device_name] = counts.get(gpu.device_name, 0) + 1
    cards = ", ".join(f"{n} &times; <code>{_text(name)}</code>" for name, n in counts.items())
    return (
        f"{cards} by PCI passthrough: whole cards inside your VM, with their own driver, all of their "
        "memory, and full isolation from other users. Billed per card-hour while the VM runs, busy or not."
    )


def _vm_resources(profile: WorkspaceProfile, vm: VmSpec) -> str:
    requests, limits = profile.resources.requests, profile.resources.limits
    memory = f"{_text(vm.guest_memory)} memory"
    if requests.get("memory") and not _same(requests["memory"], vm.guest_memory):
        memory += f" ({_text(requests['memory'])} guaranteed: under memory pressure the VM may be stopped)"
    return f"{_vm_cpu(vm, requests.get('cpu'), limits.get('cpu'))}; {memory}"


def _vm_cpu(vm: VmSpec, request: str | None, limit: str | None) -> str:
    """ "8 vCPUs, 2 guaranteed, bursting when the node is idle" (seed 001 §6)."""
    vcpus = f"{vm.vcpus} vCPU{'s' if vm.vcpus != 1 else ''}"
    if request and _same(request, str(vm.vcpus)):
        return f"{vcpus}, all guaranteed"
    parts = [vcpus]
    if request:
        parts.append(f"{_text(request)} guaranteed")
    parts.append(
        f"bursting up to {_text(limit)} CPU when the node is idle"
        if limit
        else "bursting when the node is idle"
    )
    return ", ".join(parts)


def _same(a: str, b: str) -> bool:
    try:
        return parse_quantity(a) == parse_quantity(b)
    except ValueError:
        return a == b


def _refusal_line(refusal: str) -> str:
    """A start that would be refused now (e.g. a disk limit), said on the card before the click."""
    return (
        '<span class="gpuws-card-line gpuws-refusal" data-gpuws-refusal role="status"><strong>Cannot start '
        f"now:</strong> {_text(refusal)}</span>"
    )


def build_card(profile: WorkspaceProfile, refusal: str = "") -> str:
    """The HTML card shown under the profile's name on the spawn form: a short summary (description,
    why it cannot start now if it cannot, what is free now, resources with the GPU resource), then
    detail lines (what the GPU mode isolates, what is kept and wiped, the session) the page shows for
    the selected profile only."""
    lines = []
    if profile.description:
        lines.append(f'<span class="gpuws-card-description">{_text(profile.description)}</span>')
    if profile.vm is not None:
        lines.extend(_vm_lines(profile, profile.vm))
    else:
        lines.append(_line("GPU", _text(describe_gpu_mode(profile.placement.gpu_mode)), detail=True))
        lines.append(_line("Resources", _resources(profile)))
        lines.append(_line("Kept", _kept(profile), detail=True))
        snapshots = _snapshots(profile)
        if snapshots:
            lines.append(_line("Snapshots", snapshots, detail=True))
        lines.append(_line("Wiped", _wiped(profile), detail=True))
    availability = _availability_line(profile)
    if availability:
        lines.insert(1 if profile.description else 0, availability)
    if refusal:
        lines.insert(1 if profile.description else 0, _refusal_line(refusal))
    shared = _shared(profile)
    if shared:
        lines.append(_line("Shared data", shared, detail=True))
    lines.append(_line("Session", _session(profile), detail=True))
    if profile.cost_center:
        lines.append(_line("Cost center", f"<code>{_text(profile.cost_center)}</code>", detail=True))
    return '<span class="gpuws-card">' + "<br>".join(lines) + "</span>"


def _ide_option(profile: WorkspaceProfile) -> dict[str, Any]:
    choices = {
        ide: {
            "display_name": IDE_NAMES[ide],
            "default": ide == profile.ide.default,
            "kubespawner_override": {},
        }
        for ide in profile.ide.choices
    }
    return {"display_name": "Editor", "choices": choices, "unlisted_choice": {"enabled": False}}


def build_profile_entry(profile: WorkspaceProfile, *, default: bool, refusal: str = "") -> dict[str, Any]:
    """One ``profile_list`` entry; ``display_name`` and ``description`` are escaped HTML."""
    entry: dict[str, Any] = {
        "slug": profile.slug,
        "display_name": _text(profile.display_name),
        "description": build_card(profile, refusal),
        "default": default,
        "kubespawner_override": {},
    }
    if len(profile.ide.choices) > 1:
        entry["profile_options"] = {"ide": _ide_option(profile)}
    return entry


def build_profile_list(
    catalog: Catalog,
    user: str,
    groups: Iterable[str],
    refusals_by_runtime: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """KubeSpawner ``profile_list`` entries for the profiles ``user`` may start (none: an empty list).

    Exactly one entry has ``default: True``: the catalog's default if the user may start it, else the
    first. ``kubespawner_override`` is empty: the spawner applies the chosen profile itself.
    ``refusals_by_runtime`` ("container"/"vm" -> why a start of that runtime would be refused now, e.g.
    a disk limit): those profiles' cards say so before the click.
    """
    group_set = frozenset(groups)
    default = default_profile_for(catalog, user, group_set)
    refusals = refusals_by_runtime or {}
    return [
        build_profile_entry(profile, default=profile is default, refusal=refusals.get(profile.runtime, ""))
        for profile in accessible_profiles(catalog, user, group_set)
    ]
