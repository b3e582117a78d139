"""Hand heap memory that native libraries have freed back to the operating system.

torch, Arrow and Lance allocate and free large buffers of varying sizes for every batch;
glibc keeps the freed pages in its arenas, so a long ingest run's RSS kept growing although
nothing was retained (benchmarks/RESULTS.md, "Pipelining and memory", has the figures).
`malloc_trim(0)` after each batch returns those pages. A no-op where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache
from typing import Any


@cache
def _malloc_trim() -> Any:
    """glibc's malloc_trim, or None on another C library."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    return getattr(ctypes.CDLL(name), "malloc_trim", None)


def release_free_memory() -> None:
    """Return free heap pages to the OS (glibc only)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
