"""Run a :class:`DevCluster` on a background thread, for synchronous callers (kubectl, JupyterHub)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from .cluster import DevCluster

T = TypeVar("T")


class BackgroundCluster:
    """``with BackgroundCluster(tmp_path) as bg: subprocess.run(["kubectl", ...])``."""

    def __init__(self, state_dir: Path, **kwargs: Any) -> None:
        self.state_dir = state_dir
        self.kwargs = kwargs
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="devcluster", daemon=True)
        self.cluster: DevCluster | None = None

    def __enter__(self) -> BackgroundCluster:
        self._thread.start()
        self.cluster = self.run(self._start)
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def _start(self) -> DevCluster:
        cluster = DevCluster(self.state_dir, **self.kwargs)
        await cluster.start()
        return cluster

    def run(self, fn: Callable[[], Coroutine[Any, Any, T]], timeout: float = 60) -> T:
        """Run ``fn()`` on the cluster's loop and wait for its result."""
        fut: Future[T] = asyncio.run_coroutine_threadsafe(fn(), self.loop)
        return fut.result(timeout)

    def call(self, fn: Callable[[], T], timeout: float = 60) -> T:
        """Run a plain function on the cluster's loop (the store is not thread-safe)."""

        async def wrapper() -> T:
            return fn()

        return self.run(wrapper, timeout)

    @property
    def kubeconfig(self) -> Path:
        assert self.cluster is not None
        return self.cluster.kubeconfig

    def close(self) -> None:
        if self.cluster is not None:
            self.run(self.cluster.stop)
            self.cluster = None
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
        if not self.loop.is_running():
            self.loop.close()
