"""The event loop that runs the searches' LanceDB queries (its async API), on a kept thread.

One loop per process, made on first use: every searcher's lists go through it, from any
thread (the service's search threads included), and LanceDB's own Rust threads do the
searching, so the loop's thread only starts queries and turns their results into rows. A
forked child makes its own on first use (the parent's thread does not survive a fork).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def submit(work: Coroutine[Any, Any, T]) -> Future[T]:
    """Start `work` on the loop; its result (or exception) comes through the future."""
    return asyncio.run_coroutine_threadsafe(work, _running_loop())


def run(work: Coroutine[Any, Any, T]) -> T:
    """Run `work` on the loop and wait for its result."""
    return submit(work).result()


def _running_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="search-queries", daemon=True).start()
        return _loop


def _forget_loop() -> None:
    global _loop, _lock
    _loop, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_loop)
