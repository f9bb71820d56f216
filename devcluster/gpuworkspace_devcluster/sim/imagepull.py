"""The kubelet's image manager for one pod (``EnsureImageExists``): pull policy, pulls, pull back-off.

Events and waiting reasons as the kubelet's: ``Pulling``, ``Pulled`` (fresh or "already present on
machine"), ``Failed`` with the registry's error then ``Error: ErrImagePull``; inside the back-off
(10 s doubling to 5 min by default) ``BackOff`` "Back-off pulling image" and ``Error: ImagePullBackOff``.
A pull takes the kubelet's configured delay plus any injected slow-pull delay; the node's image cache
(what "present" means) is the kubelet's, persisted across restarts.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..store import Obj
from . import images
from .podstatus import ContainerRun, go_duration

if TYPE_CHECKING:
    from .podworker import NodeAgent


@dataclass
class _Backoff:
    duration: float
    until: float
    error: str


class ImagePuller:
    def __init__(self, agent: NodeAgent) -> None:
        self.k = agent
        self.backoff: dict[str, _Backoff] = {}  # per image, for this pod (the kubelet keys it by pod UID)

    async def ensure(self, pod: Obj, c: Obj, run: ContainerRun) -> tuple[bool, float | None]:
        """(True, None) when the image is there; else (False, seconds until it is worth trying again)."""
        cfg, image = self.k.config, c.get("image", "")
        info = images.lookup(image)
        present = info is not None and self.k.pulled(info.ref)
        policy = c.get("imagePullPolicy") or "IfNotPresent"
        if policy == "Never" and not present:
            msg = f'Container image "{image}" is not present with pull policy of Never'
            self.k.record(pod, "Warning", "ErrImageNeverPull", msg)
            run.waiting = ("ErrImageNeverPull", msg)
            return False, float(cfg.volume_retry_s)
        if info is not None and present and policy != "Always":
            self.k.record(pod, "Normal", "Pulled", f'Container image "{image}" already present on machine')
            run.image_ref, run.image_id = info.ref, info.image_id
            return True, None
        now = time.monotonic()
        backoff = self.backoff.get(image)
        if backoff is not None and now < backoff.until:
            self.k.record(pod, "Normal", "BackOff", f'Back-off pulling image "{image}"')
            self.k.record(pod, "Warning", "Failed", "Error: ImagePullBackOff")
            run.waiting = (
                "ImagePullBackOff",
                f'Back-off pulling image "{image}": ErrImagePull: {backoff.error}',
            )
            return False, backoff.until - now
        self.k.record(pod, "Normal", "Pulling", f'Pulling image "{image}"')
        await asyncio.sleep(self.k.pull_delay(image))
        took = time.monotonic() - now
        if info is None:
            err = images.pull_error(image)
            self.k.record(pod, "Warning", "Failed", f'Failed to pull image "{image}": {err}')
            self.k.record(pod, "Warning", "Failed", "Error: ErrImagePull")
            run.waiting = ("ErrImagePull", err)
            duration = min(backoff.duration * 2, cfg.backoff_max_s) if backoff else cfg.backoff_base_s
            self.backoff[image] = _Backoff(duration, time.monotonic() + duration, err)
            return False, duration / 2  # the next sync lands inside the back-off: ImagePullBackOff
        self.backoff.pop(image, None)
        self.k.mark_pulled(info.ref)
        span = go_duration(took)
        self.k.record(
            pod,
            "Normal",
            "Pulled",
            f'Successfully pulled image "{image}" in {span} ({span} including waiting). Image size: {info.size} bytes.',
        )
        run.image_ref, run.image_id = info.ref, info.image_id
        return True, None
