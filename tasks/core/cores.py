"""How many workers of a kind a process runs: set by an environment variable, else derived
from the cores this process may use."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def workers_from_env(variable: str, default: int) -> int:
    """$`variable` as a count of at least 1, else `default`."""
    configured = os.environ.get(variable, "").strip()
    if not configured:
        return default
    workers = int(configured)
    if workers < 1:
        raise ValueError(f"{variable} must be at least 1, not {configured}")
    return workers
