"""Who holds a dataset's lock, and what a run that waits for it says (tasks/dataset/lock.py).

Every kind of lock records its holder as a `Holder`: the host, the process, the Prefect flow
run it runs if any, and since when.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from tasks.dataset.location import DatasetError

Logger = logging.Logger | logging.LoggerAdapter


@dataclass(frozen=True)
class Holder:
    """Who holds a lock: a process on a host, in a Prefect flow run when it runs one."""

    host: str
    pid: int
    since: str  # when it took the lock, ISO 8601 UTC
    run: str | None = None  # the flow run's name
    run_id: str | None = None  # and id

    @classmethod
    def this_process(cls) -> Holder:
        run, run_id = _flow_run()
        since = datetime.now(UTC).isoformat(timespec="seconds")
        return cls(socket.gethostname(), os.getpid(), since, run, run_id)

    @classmethod
    def from_dict(cls, value: object) -> Holder | None:
        """The holder recorded as `value` (JSON-decoded); None when it is not one."""
        if not isinstance(value, dict):
            return None
        try:
            host, pid, since = str(value["host"]), int(value["pid"]), str(value["since"])
        except (KeyError, TypeError, ValueError):
            return None
        return cls(host, pid, since, _text(value.get("run")), _text(value.get("run_id")))

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def describe(self) -> str:
        """e.g. "pid 4242 on build-7 (flow run 'gentle-fox'), since 2026-12-03 19:00:01 UTC"."""
        run = f" (flow run {self.run!r})" if self.run else ""
        since = self.since.replace("T", " ").replace("+00:00", " UTC")
        return f"pid {self.pid} on {self.host}{run}, since {since}"


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _flow_run() -> tuple[str | None, str | None]:
    """The name and id of the Prefect flow run this process runs, if any (Prefect is not
    imported for it: a process that never imported Prefect runs no flow)."""
    if "prefect" not in sys.modules:
        return None, None
    from prefect.runtime import flow_run

    return flow_run.get_name(), flow_run.get_id()


def held_by(holder: Holder | None) -> str:
    """Who holds a lock, for a message."""
    return holder.describe() if holder is not None else "a run that did not say who it is"


def timed_out(uri: str, timeout: float, holder: Holder | None) -> DatasetError:
    """The error of a run that could not get the lock of `uri` within `timeout` seconds."""
    return DatasetError(
        f"another ingest run is still writing {uri} after {timeout:.0f} s: its lock is held by "
        f"{held_by(holder)}; try later (--lock-timeout waits longer)"
    )


def say_waiting(
    logger: Logger,
    uri: str,
    holder: Holder | None,
    timeout: float,
    renewed: datetime | None = None,
) -> None:
    """Log that this run waits for the lock of `uri`, for whom, and when the holder last
    renewed it (a lock held by a lease records that)."""
    logger.warning(
        "another ingest run holds the lock of %s: %s%s; waiting up to %.0f s",
        uri,
        held_by(holder),
        "" if renewed is None else f", last renewed {renewed_at(renewed)}",
        timeout,
    )


def renewed_at(renewed: datetime) -> str:
    """e.g. "2026-12-03 19:00:41 UTC (12 s ago)": when a lock was last renewed, and how long
    ago by this machine's clock."""
    ago = (datetime.now(UTC) - renewed).total_seconds()
    return f"{renewed.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC ({max(ago, 0):.0f} s ago)"
