"""Test hooks that make pipeline steps fail on purpose; inert unless their variable is set.

- DOC_INDEXER_FAULTS="load=0.3,embed=0.3,write=0.3": the step raises `InjectedFault` on that
  fraction of its calls, deterministically (calls are counted per process and the failures
  are spread evenly, never two in a row below a rate of 0.5), so retries recover.
- DOC_INDEXER_CRASH="write:2": the process kills itself with SIGKILL at the 2nd time it
  reaches crash point `write`. Points: load, embed, write (between the chunks commit and the
  ledger commit of a batch), delete (the same for vanished documents), index (indexes made,
  nothing compacted), compact (after each table's compaction, before its run tag).
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter

FAULTS_ENV = "DOC_INDEXER_FAULTS"
CRASH_ENV = "DOC_INDEXER_CRASH"

_calls: Counter[str] = Counter()
_lock = threading.Lock()


class InjectedFault(RuntimeError):
    """A transient failure injected by DOC_INDEXER_FAULTS."""


def _count(key: str) -> int:
    with _lock:
        _calls[key] += 1
        return _calls[key]


def _rates() -> dict[str, float]:
    spec = os.environ.get(FAULTS_ENV, "")
    pairs = (item.split("=", 1) for item in spec.split(",") if "=" in item)
    return {step.strip(): float(rate) for step, rate in pairs}


def maybe_fail(step: str) -> None:
    """Raise InjectedFault on the configured fraction of this step's calls."""
    rate = _rates().get(step, 0.0)
    if rate <= 0:
        return
    n = _count(f"fault:{step}")
    if int(n * rate) > int((n - 1) * rate):
        raise InjectedFault(f"injected transient failure in {step} (call {n})")


def maybe_crash(point: str) -> None:
    """SIGKILL this process at the configured occurrence of a crash point."""
    target, _, nth = os.environ.get(CRASH_ENV, "").partition(":")
    if target == point and _count(f"crash:{point}") == int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
