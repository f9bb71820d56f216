"""The one worker thread that runs the collector's CPU-bound pure steps off the event loop (I/O shell).

A cycle's pure work (cutting and parsing the scraped texts, the attribution, rendering the snapshot,
freeing the replaced one) and rendering ``/metrics`` run here, one step after another, never on the
event loop. It is a single thread on purpose: the interpreter runs one thread's Python at a time, and
every thread that wants the GIL competes with the event loop's thread for it; ``asyncio.to_thread``
would let up to six of a cycle's steps (a cut or a parse per scraped text) compete at once. With one
worker an API request waits for that thread's turn alone, which ``sys.setswitchinterval`` (set by
the service) bounds.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

_WORKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="attribution-cpu")


async def off_loop(fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """``fn(*args, **kwargs)`` on the collector's worker thread (queued behind its earlier steps)."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_WORKER, functools.partial(fn, *args, **kwargs))
