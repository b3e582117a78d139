"""Keep native libraries' heap memory bounded: freed pages go back to the operating system,
threads share few heap arenas, and Lance reads few fragments ahead and keeps small caches.

torch, Arrow and Lance allocate and free large buffers of varying sizes for every batch;
glibc keeps the freed pages in its arenas, so a long ingest run's RSS kept growing although
nothing was retained (benchmarks/RESULTS.md, "Pipelining and memory", has the figures).
`malloc_trim(0)` after each batch returns those pages.

The finalize's steps (compaction, the index builds) read the whole table. Measured apart on
200,000 rows (benchmarks/finalize_memory.py; RESULTS.md, "Scale", "Memory"), compaction
added about 615 MiB to the process: Lance reads many fragments ahead at once (its default
follows its I/O parallelism), and glibc gives each of Lance's threads an arena of its own
(up to eight per core), so blocks one thread frees are not reused by another. One fragment
ahead and two arenas brought it to about 190 MiB. `bound_native_memory` sets both, once, before
the process's first Lance scan (Lance reads its variable once).
No-ops for the allocator where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from functools import cache
from typing import Any

M_ARENA_MAX = -8  # mallopt's parameter number for the arena cap (glibc's malloc.h)
HEAP_ARENAS = 2  # arenas glibc may create from the cap on (threads then share them)
READAHEAD_VARIABLE = "LANCE_DEFAULT_FRAGMENT_READAHEAD"
FRAGMENT_READAHEAD = 1  # fragments a Lance scan reads ahead; the variable, when set, wins
# Lance's cache of index pages and its cache of table metadata, each, in a bounded process's
# connections (Lance's defaults are in GiB): through a first run of 100,000 notes they grew
# with the table, about 60 MiB of the write phase's growth (benchmarks/RESULTS.md, "Scale on
# this session's machine"); at 32 MiB each the run's stages took as long.
WRITER_CACHE_BYTES = 32 * 2**20


@cache
def _libc() -> Any:
    """The C library, or None where it cannot be found."""
    name = ctypes.util.find_library("c")
    return None if name is None else ctypes.CDLL(name)


def release_free_memory() -> None:
    """Return free heap pages to the OS (glibc only)."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is not None:
        trim(0)


@cache
def bound_native_memory() -> None:
    """Cap glibc's heap arenas, Lance's fragment read-ahead and the caches of the connections
    opened after it (`lance_cache_bytes`), once per process; call it before the first Lance
    scan. The ingest flow does, for the writer's sake; searches are left with Lance's
    defaults (their speed under these bounds is not measured)."""
    os.environ.setdefault(READAHEAD_VARIABLE, str(FRAGMENT_READAHEAD))
    mallopt = getattr(_libc(), "mallopt", None)
    if mallopt is not None:
        mallopt(M_ARENA_MAX, HEAP_ARENAS)


def lance_cache_bytes() -> int | None:
    """The size of each of Lance's caches for a connection opened now: WRITER_CACHE_BYTES
    once `bound_native_memory` ran in this process, else None (Lance's defaults)."""
    return WRITER_CACHE_BYTES if bound_native_memory.cache_info().currsize else None
