"""GPU devices per node and their allocation to pods: what the NVIDIA device plugin and the kubelet's
device manager keep (its checkpoint is ``sim/devices.json``, so allocations survive restarts).

The kubelet allocates at pod admission (``allocate``) and releases when the pod is gone (``release``);
the DCGM exporter reads ``inventory``/``on_node``, as the real one reads the pod-resources API.
Device ids are the device plugin's: a whole GPU is ``GPU-<uuid>``, a time-sliced slot is
``GPU-<uuid>::<replica>``, a MIG device is ``MIG-<uuid>``.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson

from .topology import GPU_RESOURCE, MIG_PREFIX, SHARED_RESOURCE, Topology


class DeviceUnavailable(Exception):
    """Not enough free devices: the kubelet rejects the pod with ``UnexpectedAdmissionError``."""


@dataclass(frozen=True)
class Gpu:
    node: str
    index: int
    uuid: str  # "GPU-…"
    model: str
    mode: str  # exclusive | time-sliced | mig
    memory_mib: int
    resource: str
    replicas: int = 1
    mig_profile: str = ""
    mig_devices: tuple[str, ...] = ()  # "MIG-…" per slice
    fail_requests_greater_than_one: bool = False

    @property
    def device_ids(self) -> tuple[str, ...]:
        """The ids the device plugin advertises for this card, in allocation order."""
        if self.mode == "time-sliced":
            return tuple(f"{self.uuid}::{r}" for r in range(self.replicas))
        if self.mode == "mig":
            return self.mig_devices
        return (self.uuid,)


@dataclass(frozen=True)
class DeviceRef:
    """One allocated device: a whole GPU, a time-sliced slot or a MIG device."""

    node: str
    resource: str
    device_id: str
    gpu_index: int
    gpu_uuid: str
    model: str
    mode: str
    pod_uid: str
    slot: int = 0  # replica (time-sliced) or slice (MIG) number
    namespace: str = ""
    pod: str = ""
    container: str = ""

    @property
    def visible_id(self) -> str:
        """What goes into ``NVIDIA_VISIBLE_DEVICES``: the GPU's UUID, or the MIG device's."""
        return self.device_id if self.mode == "mig" else self.gpu_uuid


def gpu_uuid(node: str, index: int) -> str:
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"devcluster://{node}/gpu/{index}"))


def mig_uuid(node: str, index: int, profile: str, slice_: int) -> str:
    """Stable per (card, profile, slice): repartitioning a card gives new MIG devices, as on real hardware."""
    return "MIG-" + str(
        uuid.uuid5(uuid.NAMESPACE_URL, f"devcluster://{node}/gpu/{index}/mig/{profile}/{slice_}")
    )


def is_device_resource(resource: str) -> bool:
    """Resources this manager hands out (everything else is plain accounting)."""
    return resource in (GPU_RESOURCE, SHARED_RESOURCE) or resource.startswith(MIG_PREFIX)


def build_inventory(topology: Topology) -> dict[str, list[Gpu]]:
    out: dict[str, list[Gpu]] = {}
    for node in topology.nodes:
        out[node.name] = [
            Gpu(
                node=node.name,
                index=g.index,
                uuid=gpu_uuid(node.name, g.index),
                model=g.model,
                mode=g.mode,
                memory_mib=g.memory_mib,
                resource=g.resource,
                replicas=g.replicas if g.mode == "time-sliced" else 1,
                mig_profile=g.mig_profile,
                mig_devices=tuple(
                    mig_uuid(node.name, g.index, g.mig_profile, s) for s in range(g.mig_slices)
                ),
                fail_requests_greater_than_one=g.fail_requests_greater_than_one,
            )
            for g in node.gpus
        ]
    return out


class DeviceManager:
    def __init__(self, state_dir: Path | str, topology: Topology) -> None:
        self.path = Path(state_dir) / "sim" / "devices.json"
        self._inventory = build_inventory(topology)
        self._known = {
            (gpu.node, dev): (gpu, slot)
            for gpus in self._inventory.values()
            for gpu in gpus
            for slot, dev in enumerate(gpu.device_ids)
        }
        self._allocations: list[DeviceRef] = []
        self._load()

    # ---------------------------------------------------------------- reads
    def inventory(self, node: str) -> list[Gpu]:
        return list(self._inventory.get(node, ()))

    def on_node(self, node: str) -> list[DeviceRef]:
        """Allocations on ``node``, in device order."""
        return sorted((r for r in self._allocations if r.node == node), key=lambda r: (r.gpu_index, r.slot))

    def for_pod(self, pod_uid: str) -> list[DeviceRef]:
        return [r for r in self._allocations if r.pod_uid == pod_uid]

    def free(self, node: str, resource: str) -> list[tuple[Gpu, int, str]]:
        """Unallocated (gpu, slot, device id) for ``resource`` on ``node``, in allocation order."""
        used = {r.device_id for r in self._allocations if r.node == node}
        return [
            (gpu, slot, dev)
            for gpu in self._inventory.get(node, ())
            if gpu.resource == resource
            for slot, dev in enumerate(gpu.device_ids)
            if dev not in used
        ]

    # --------------------------------------------------------------- writes
    def allocate(
        self,
        node: str,
        pod_uid: str,
        resource: str,
        count: int,
        *,
        namespace: str = "",
        pod: str = "",
        container: str = "",
    ) -> list[DeviceRef]:
        """Give ``count`` devices of ``resource`` on ``node`` to a pod's container.

        Idempotent per (pod, container, resource): a re-admission after a restart gets the same devices.
        Raises :class:`DeviceUnavailable` with the kubelet's message when too few are free, or when a
        time-sliced resource with ``fail_requests_greater_than_one`` is asked for more than one slot.
        """
        if not is_device_resource(resource):
            raise ValueError(f"{resource} is not a device resource")
        if count <= 0:
            return []
        held = [
            r
            for r in self._allocations
            if r.pod_uid == pod_uid and r.node == node and r.resource == resource and r.container == container
        ]
        if len(held) == count:
            return held
        strict = any(
            g.fail_requests_greater_than_one for g in self._inventory.get(node, ()) if g.resource == resource
        )
        if strict and count > 1:  # the device plugin's Allocate error, as the kubelet words it
            raise DeviceUnavailable(
                f"Allocate failed due to rpc error: code = Unknown desc = request for '{resource}: {count}' too "
                "large: maximum request size for shared resources is 1, which is unexpected"
            )
        free = self.free(node, resource) + [
            (self._known[(node, r.device_id)][0], r.slot, r.device_id) for r in held
        ]
        if len(free) < count:
            raise DeviceUnavailable(
                f"Allocate failed due to requested number of devices unavailable for {resource}. "
                f"Requested: {count}, Available: {len(free)}, which is unexpected"
            )
        free.sort(key=lambda f: (f[0].index, f[1]))
        self._allocations = [r for r in self._allocations if r not in held]
        refs = [
            DeviceRef(
                node,
                resource,
                dev,
                gpu.index,
                gpu.uuid,
                gpu.model,
                gpu.mode,
                pod_uid,
                slot,
                namespace,
                pod,
                container,
            )
            for gpu, slot, dev in free[:count]
        ]
        self._allocations.extend(refs)
        self._save()
        return refs

    def release(self, pod_uid: str) -> list[DeviceRef]:
        """Free everything the pod holds; returns what was freed."""
        freed = self.for_pod(pod_uid)
        if freed:
            self._allocations = [r for r in self._allocations if r.pod_uid != pod_uid]
            self._save()
        return freed

    def prune(self, live_pod_uids: Iterable[str]) -> list[DeviceRef]:
        """Free allocations of pods that no longer exist (the device manager's cleanup after a restart)."""
        live = set(live_pod_uids)
        dead = [r for r in self._allocations if r.pod_uid not in live]
        if dead:
            self._allocations = [r for r in self._allocations if r.pod_uid in live]
            self._save()
        return dead

    # ---------------------------------------------------------- persistence
    def _load(self) -> None:
        try:
            data = orjson.loads(self.path.read_bytes())
        except FileNotFoundError:
            return
        except (OSError, orjson.JSONDecodeError):
            return  # a torn checkpoint: start empty, as the kubelet does with a corrupt one
        for raw in data.get("allocations", []):
            with contextlib.suppress(TypeError):
                ref = DeviceRef(**raw)
                known = self._known.get((ref.node, ref.device_id))
                if known is not None and known[0].resource == ref.resource:  # the topology may have changed
                    self._allocations.append(ref)

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(
            orjson.dumps(
                {"version": 1, "allocations": [asdict(r) for r in self._allocations]},
                option=orjson.OPT_INDENT_2,
            )
        )
        os.replace(tmp, self.path)
