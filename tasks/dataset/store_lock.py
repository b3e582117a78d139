"""The lock of an object-store dataset without a shared Prefect API: a lock object in the store.

The lock object (LOCK_OBJECT, beside the dataset's tables) is JSON: the holder
(`tasks.dataset.holders.Holder`), a token of the lock that wrote it, its lease in seconds, whether
it was released, and a count of writes, so that every write has new content and so a new ETag.

- Taking: a create-only put (If-None-Match). Where the object exists, the run reads it and
  replaces it with a put conditional on the ETag it read (If-Match), so that of two waiters
  only one succeeds, but only when the lock was released, or when its holder stopped
  renewing it (it crashed or was killed) a whole lease ago. The lease is counted from the
  last write, at the time the record says it was written (the holder's clock), on the
  waiter's clock, and only while the ETag stays the one the waiter first saw: so a lock
  killed a lease ago is taken at the first look, not a lease after it. The clocks of two
  machines may disagree: a waiter whose clock is ahead by d counts a lease d too early, so
  a live holder (which renews every third of its lease) keeps its lock unless d exceeds
  two thirds of the lease; a time in the future counts as now, and a record without one
  (not written by this module) is a lease old a lease after the waiter first saw it.
- Holding: a background thread rewrites the object every third of the lease, conditional on
  its last ETag. A failed condition means another run took the lock over (this one did not
  renew it for a whole lease): that is logged at once, and the run fails at its end.
- Releasing: a conditional put of the record marked released, not a delete: S3 has no
  conditional delete, and a delete could remove a lock another run had just taken.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tasks.dataset.holders import Holder, Logger, say_waiting, timed_out
from tasks.dataset.location import DatasetError
from tasks.dataset.object_store import open_store

if TYPE_CHECKING:
    from obstore.store import ObjectStore

LOCK_OBJECT = ".ingest.lock"  # the name a local dataset's lock file has too
POLL_S = 2.0  # how often a waiter reads the lock object (at most; a quarter of the lease)


@dataclass(frozen=True)
class Found:
    """What a waiter read in the lock object."""

    holder: Holder | None  # None: not a record of this module (it may be edited by hand)
    lease_s: float
    released: bool
    token: str | None = None  # which lock wrote it: a process may take one lock twice
    written: datetime | None = None  # its last write (taken or renewed), by the holder's clock


class StoreLock:
    """The lock object of the dataset at `uri`, taken, renewed and released by this process."""

    def __init__(self, uri: str, lease_s: float, logger: Logger):
        self.uri, self.lease_s, self.logger = uri, lease_s, logger
        self.store: ObjectStore = open_store(uri)
        self.holder = Holder.this_process()
        self.token = uuid.uuid4().hex
        self.lost = False  # another run took the lock over while this one held it
        self._version: dict[str, Any] = {}  # the ETag (and version) of this run's last write
        self._writes = 0
        self._seen: tuple[str, float] | None = None  # an ETag a waiter saw, and since when
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    # -- taking ---------------------------------------------------------------------------------

    def acquire(self, timeout: float) -> None:
        """Take the lock, waiting up to `timeout` seconds; DatasetError naming the holder if
        it stays taken."""
        deadline = time.monotonic() + timeout
        found = self._attempt()
        if found is not None:
            say_waiting(self.logger, self.uri, found.holder, timeout, found.written)
        while found is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise timed_out(self.uri, timeout, found.holder)
            time.sleep(min(POLL_S, self.lease_s / 4, remaining))
            found = self._attempt()
        self._renewer = threading.Thread(
            target=self._renew, name=f"lock-renewal {self.uri}", daemon=True
        )
        self._renewer.start()

    def _attempt(self) -> Found | None:
        """`_try_take`, with a store that fails otherwise than by a condition (unreachable,
        no such bucket, no permission) as a DatasetError."""
        from obstore.exceptions import BaseError

        try:
            return self._try_take()
        except (BaseError, OSError) as exc:
            raise DatasetError(f"cannot take the lock of {self.uri} in its store: {exc}") from None

    def _try_take(self) -> Found | None:
        """Take the lock if it is free, released or expired: None when taken, else what the
        lock object says."""
        from obstore.exceptions import AlreadyExistsError, NotFoundError, PreconditionError

        self.holder = Holder.this_process()  # `since`: from when it is taken
        try:
            self._write("create")
            return None
        except AlreadyExistsError:
            pass
        try:
            found, version = self._read()
        except (NotFoundError, FileNotFoundError):  # deleted meanwhile: free at the next try
            return Found(None, self.lease_s, released=True)
        if found.token == self.token and not found.released:  # a create retried by obstore
            self._version = version
            return None
        expired = self._lease_over(str(version), found)
        if not (found.released or expired):
            return found
        try:
            self._write(version)
        except (PreconditionError, NotFoundError, FileNotFoundError):  # another waiter was first
            self._seen = None
            return found
        if not found.released:
            self.logger.warning(
                "took over the lock of %s from %s: it was not renewed for its lease of %.0f s "
                "(a crashed or killed run)",
                self.uri,
                found.holder.describe() if found.holder else "an unknown holder",
                found.lease_s,
            )
        return None

    def _lease_over(self, etag: str, found: Found) -> bool:
        """Whether the lock object at version `etag` (which says `found`) was last written a
        lease ago: its age when this waiter first saw that version (by the time its record
        gives, 0 without one), plus how long this waiter has seen it since."""
        now = time.monotonic()
        if self._seen is None or self._seen[0] != etag:
            age = 0.0 if found.written is None else _seconds_since(found.written)
            self._seen = (etag, now - min(max(age, 0.0), found.lease_s))
        return now - self._seen[1] >= found.lease_s

    # -- holding and releasing ------------------------------------------------------------------

    def _renew(self) -> None:
        from obstore.exceptions import BaseError, NotFoundError, PreconditionError

        while not self._stop.wait(self.lease_s / 3):
            try:
                self._write(self._version)
            except (PreconditionError, NotFoundError, FileNotFoundError):
                if self._still_ours():
                    continue
                self.lost = True
                self.logger.error(
                    "another run took over the lock of %s: this run did not renew it within "
                    "its lease of %.0f s; it fails at its end",
                    self.uri,
                    self.lease_s,
                )
                return
            except (BaseError, OSError) as exc:  # the store unreachable for now: try again
                self.logger.warning("could not renew the lock of %s: %s", self.uri, exc)

    def release(self) -> None:
        """Stop renewing and mark the lock released (`lost` says if another run took it)."""
        from obstore.exceptions import BaseError, NotFoundError, PreconditionError

        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        error: object = "the lock object kept changing"
        for _ in range(2):  # again after a write that reached the store but was not answered
            if self.lost:
                return
            try:
                self._write(self._version, released=True)
                return
            except (PreconditionError, NotFoundError, FileNotFoundError):
                self.lost = not self._still_ours()
            except (BaseError, OSError) as exc:
                error = exc
                break
        if not self.lost:
            self.logger.warning(
                "could not release the lock of %s (%s): other runs take it once its lease of "
                "%.0f s has run out",
                self.uri,
                error,
                self.lease_s,
            )

    def _still_ours(self) -> bool:
        """After a failed condition: whether the lock object is still this run's record (a
        write that failed on the way back but reached the store), whose version is then
        taken."""
        from obstore.exceptions import BaseError

        try:
            found, version = self._read()
        except (BaseError, OSError):
            return False
        if found.token != self.token or found.released:
            return False
        self._version = version
        return True

    # -- the lock object ------------------------------------------------------------------------

    def _write(self, mode: Any, released: bool = False) -> None:
        """Put this run's record with `mode` ("create", or the version to replace)."""
        import obstore

        self._writes += 1
        record = {
            "holder": self.holder.as_dict(),
            "token": self.token,
            "lease_s": self.lease_s,
            "released": released,
            "writes": self._writes,
            "written": datetime.now(UTC).isoformat(),
        }
        result = obstore.put(self.store, LOCK_OBJECT, json.dumps(record).encode(), mode=mode)
        self._version = _version(result)

    def _read(self) -> tuple[Found, dict[str, Any]]:
        import obstore

        got = obstore.get(self.store, LOCK_OBJECT)
        version = _version(got.meta)
        try:
            record = json.loads(bytes(got.bytes()))
        except ValueError:
            record = None
        if not isinstance(record, dict):  # not ours: it expires after a lease unchanged
            return Found(None, self.lease_s, released=False), version
        lease = record.get("lease_s")
        lease_s = float(lease) if isinstance(lease, int | float) and lease > 0 else self.lease_s
        holder, token = Holder.from_dict(record.get("holder")), record.get("token")
        released = record.get("released") is True
        written = _timestamp(record.get("written"))
        return Found(holder, lease_s, released, str(token) if token else None, written), version


def _timestamp(value: object) -> datetime | None:
    """The aware time an ISO 8601 text gives (UTC without a zone); None for anything else."""
    try:
        stamp = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None
    return stamp.replace(tzinfo=stamp.tzinfo or UTC) if stamp else None


def _seconds_since(stamp: datetime) -> float:
    return (datetime.now(UTC) - stamp).total_seconds()


def _version(meta: Any) -> dict[str, str]:
    """The version of an object, as a put conditional on it takes it (what the store gave)."""
    return {key: meta[key] for key in ("e_tag", "version") if meta.get(key) is not None}


@contextmanager
def store_lock(uri: str, timeout: float, logger: Logger, lease_s: float) -> Iterator[None]:
    """Hold the lock object of the dataset at `uri` (see the module doc)."""
    lock = StoreLock(uri, lease_s, logger)
    lock.acquire(timeout)
    logger.info("holding the lock of %s: lock object %s, lease %.0f s", uri, LOCK_OBJECT, lease_s)
    try:
        yield
    finally:
        lock.release()
        logger.info("released the lock of %s: lock object %s", uri, LOCK_OBJECT)
    if lock.lost:
        raise DatasetError(
            f"another run took over the lock of {uri} while this one wrote it (this run did "
            f"not renew it within its lease of {lease_s:.0f} s): check the dataset with "
            f"python -m flows.audit --index {uri}"
        )
