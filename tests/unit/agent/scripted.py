"""A scripted pynvml stand-in for the agent's unit tests: the real ``pynvml.NVMLError`` and constants,
devices and processes from plain data, and a chosen error per (function, device)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml


@dataclass
class Card:
    index: int
    uuid: str
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, usedGpuMemory)
    samples: list[tuple[int, int, int]] = field(default_factory=list)  # (pid, timeStamp us, smUtil)
    mig: list[tuple[int, str, list[tuple[int, int | None]]]] = field(default_factory=list)  # gi, uuid, procs


class ScriptedNvml(SimpleNamespace):
    """``errors[(function name, uuid)] = NVML error code``; ``errors[("nvmlInit", "")]`` fails init."""

    def __init__(self, cards: list[Card], errors: dict[tuple[str, str], int] | None = None) -> None:
        super().__init__()
        self.cards, self.errors = cards, errors or {}
        self.calls: list[tuple[str, Any]] = []
        for name in dir(pynvml):
            if name.startswith(("NVML_ERROR_", "NVML_DEVICE_MIG_")) or name == "NVMLError":
                setattr(self, name, getattr(pynvml, name))

    def _check(self, fn: str, key: str = "") -> None:
        if (fn, key) in self.errors:
            raise pynvml.NVMLError(self.errors[(fn, key)])

    def nvmlInit(self) -> None:
        self._check("nvmlInit")

    def nvmlShutdown(self) -> None:
        self.calls.append(("nvmlShutdown", None))

    def nvmlDeviceGetCount(self) -> int:
        self._check("nvmlDeviceGetCount")
        return len(self.cards)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> tuple[str, int | None]:
        self._check("nvmlDeviceGetHandleByIndex", self.cards[index].uuid)
        return (self.cards[index].uuid, None)

    def _card(self, handle: tuple[str, int | None]) -> Card:
        return next(c for c in self.cards if c.uuid == handle[0])

    def nvmlDeviceGetIndex(self, handle: tuple[str, int | None]) -> int:
        return self._card(handle).index

    def nvmlDeviceGetUUID(self, handle: tuple[str, int | None]) -> str:
        card = self._card(handle)
        return card.uuid if handle[1] is None else next(m[1] for m in card.mig if m[0] == handle[1])

    def nvmlDeviceGetName(self, handle: tuple[str, int | None]) -> bytes:
        return b"NVIDIA H100 80GB HBM3"  # older bindings answer bytes

    def nvmlDeviceGetMemoryInfo(self, handle: tuple[str, int | None]) -> Any:
        return SimpleNamespace(total=80 << 30, used=1 << 30, free=79 << 30)

    def nvmlDeviceGetMigMode(self, handle: tuple[str, int | None]) -> list[int]:
        self._check("nvmlDeviceGetMigMode", handle[0])
        on = pynvml.NVML_DEVICE_MIG_ENABLE if self._card(handle).mig else pynvml.NVML_DEVICE_MIG_DISABLE
        return [on, on]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: tuple[str, int | None]) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: tuple[str, int | None], i: int) -> Any:
        migs = self._card(handle).mig
        if i >= len(migs):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return (handle[0], migs[i][0])

    def nvmlDeviceGetGpuInstanceId(self, handle: tuple[str, int | None]) -> int:
        assert handle[1] is not None
        return handle[1]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: tuple[str, int | None]) -> list[Any]:
        self._check("nvmlDeviceGetComputeRunningProcesses", self.nvmlDeviceGetUUID(handle))
        card = self._card(handle)
        procs = card.processes if handle[1] is None else next(m[2] for m in card.mig if m[0] == handle[1])
        return [SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in procs]

    def nvmlDeviceGetProcessUtilization(self, handle: tuple[str, int | None], last: int) -> list[Any]:
        self.calls.append(("nvmlDeviceGetProcessUtilization", (self.nvmlDeviceGetUUID(handle), last)))
        if handle[1] is not None or self._card(handle).mig:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        self._check("nvmlDeviceGetProcessUtilization", handle[0])
        samples = [
            SimpleNamespace(pid=p, timeStamp=t, smUtil=u, memUtil=0)
            for p, t, u in self._card(handle).samples
            if t > last
        ]
        if not samples:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return samples
