"""The dataset's ingest lock: runs on one dataset take turns, and a waiting run says so."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from filelock import FileLock, Timeout

from tasks.dataset.location import DatasetError, lock_file

Logger = logging.Logger | logging.LoggerAdapter


@contextmanager
def ingest_lock(uri: str, timeout: float, logger: Logger) -> Iterator[None]:
    """Hold the ingest lock of the dataset at `uri`: a second run waits for the first, visibly.

    See `tasks.dataset.location.lock_file` for where the lock lives; for an object-store
    dataset it only keeps apart runs on this machine (the deployment's concurrency limit
    does the rest).
    """
    path = lock_file(uri)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        logger.warning("another ingest run holds %s; waiting up to %.0f s", path, timeout)
        try:
            lock.acquire(timeout=timeout)
        except Timeout:
            raise DatasetError(
                f"another ingest run is still writing {uri} after {timeout:.0f} s; try later"
            ) from None
    try:
        yield
    finally:
        lock.release()
