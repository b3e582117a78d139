"""The dataset's lock: runs that write one dataset (ingest, repair, restore) take turns.

Which lock depends on where the dataset is and on the Prefect API:

- a local dataset: a file lock in its folder (`tasks.dataset.location.lock_file`);
- an object-store dataset: a lock object in the store, written with conditional puts and held
  by a lease (tasks/dataset/store_lock.py); with a shared Prefect API
  (`tasks.core.prefect_api`) first a Prefect global concurrency limit of one slot named after
  the dataset (tasks/dataset/prefect_lock.py), so that the runs of that API wait for each
  other where its UI shows them, and the lock object keeps them apart from runs on machines
  with another API or none.

The last two hold across machines. A run that waits says who holds the lock; one that cannot
get it within its timeout fails with a DatasetError naming the holder (host, pid, run, since
when). Every lock records its holder the same way (tasks/dataset/holders.py).

The lease (DOC_INDEXER_LOCK_LEASE seconds, LEASE_S by default) is how long a holder that has
stopped renewing (a crashed or killed run) keeps the lock; holders renew well within it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from tasks.core.options import Settings, option
from tasks.dataset.holders import Holder, Logger, say_waiting, timed_out
from tasks.dataset.location import DatasetError, local_path, lock_file

LEASE_ENV = "DOC_INDEXER_LOCK_LEASE"
LEASE_S = 60.0  # see the module doc


def lease_seconds() -> float:
    """The lease of the locks this process takes, from LEASE_ENV (seconds)."""
    raw = os.environ.get(LEASE_ENV, "").strip()
    if not raw:
        return LEASE_S
    try:
        lease = float(raw)
    except ValueError:
        lease = 0.0
    if not lease > 0:
        raise DatasetError(f"{LEASE_ENV} must be a number of seconds above 0, not {raw!r}")
    return lease


class LockOption(Settings):
    """How long a run that writes a dataset waits for the run that holds its lock."""

    lock_timeout: float = option(
        3600.0, "seconds to wait for another run writing the same dataset", ge=0
    )


def ingest_lock(uri: str, timeout: float, logger: Logger) -> AbstractContextManager[None]:
    """Hold the lock of the dataset at `uri` (see the module doc for which one): a second
    run waits up to `timeout` seconds for the first, visibly."""
    if local_path(uri) is not None:
        return file_lock(uri, timeout, logger)
    from tasks.core.prefect_api import shared_api_url
    from tasks.dataset.store_lock import store_lock

    lease = lease_seconds()
    if shared_api_url() is None:
        return store_lock(uri, timeout, logger, lease)
    from tasks.dataset.prefect_lock import prefect_lock

    return in_turn(
        prefect_lock(uri, timeout, logger, lease), store_lock(uri, timeout, logger, lease)
    )


@contextmanager
def in_turn(*locks: AbstractContextManager[None]) -> Iterator[None]:
    """Hold each lock, taken in order (released in reverse)."""
    with ExitStack() as stack:
        for lock in locks:
            stack.enter_context(lock)
        yield


@contextmanager
def file_lock(uri: str, timeout: float, logger: Logger) -> Iterator[None]:
    """The lock of a local dataset: a file lock in its folder (it keeps apart the runs of
    one machine, which are the only ones that write a folder of its own). The holder is
    recorded beside it, as the lock file itself is truncated by every waiter."""
    path = lock_file(uri)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = path.with_name(path.name + ".holder")
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        say_waiting(logger, uri, _read_holder(record), timeout)
        try:
            lock.acquire(timeout=timeout)
        except Timeout:
            raise timed_out(uri, timeout, _read_holder(record)) from None
    try:
        record.write_text(json.dumps(Holder.this_process().as_dict()), "utf-8")
        yield
    finally:
        lock.release()


def _read_holder(record: Path) -> Holder | None:
    try:
        return Holder.from_dict(json.loads(record.read_text("utf-8")))
    except (OSError, ValueError):
        return None
