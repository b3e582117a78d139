"""Keep an index live: file events under a folder become the changed paths of the next run.

A `FolderWatcher` thread turns watchfiles' events into paths relative to the folder, drops
those no scan would pick up (hidden files, editor temp files, `--exclude` names, files of no
supported format) and adds the rest to a `ChangeQueue`. `keep_live` runs a full reconcile
first, then, one run at a time, a run of every path the queue holds: changes that arrive
during a run wait in the queue (a path changed ten times is one path) and make the next run,
and a run that raises puts its paths back. Nothing here knows Prefect: the caller passes the
function that runs an ingest restricted to the paths (flows/watch.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import watchfiles

from tasks.core.options import Settings, option
from tasks.ingest.discover import ScanSettings
from tasks.parse.formats import MIME_TYPES

# A steady stream of events (a long copy) is handed over at least every debounce × this.
MAX_GROUPING = 10
# How often the idle watcher thread comes back from watchfiles' wait (to say it is watching).
WAKE_MS = 1000
# Seconds before the paths of a run that raised are tried again.
RETRY_S = 5.0

log = logging.getLogger(__name__)


class WatchSettings(Settings):
    """How file events become runs."""

    debounce: float = option(
        0.2,
        "seconds without a new file event before the changes start a run (a steady stream "
        f"of events starts one at least every {MAX_GROUPING} x that)",
        gt=0,
        le=60,
    )


class WatchError(RuntimeError):
    """The folder can no longer be watched (it vanished, or the system refused a watch)."""


def changed_path(root: Path, event_path: str, scan: ScanSettings) -> str | None:
    """The path of a file event relative to `root` ("" for the root itself), or None when no
    scan would look at it: a hidden or excluded name on the way, or an existing file of no
    supported format. A folder, and a path that is gone (a file or a whole folder deleted or
    moved away), is kept: the run finds out what the ledger held under it."""
    path = Path(event_path)
    try:
        relative = path.relative_to(root)
    except ValueError:
        return None
    if any(scan.excluded(name) for name in relative.parts):
        return None
    if MIME_TYPES.get(path.suffix.lower()) is None and path.is_file():
        return None
    return "" if relative == Path(".") else relative.as_posix()


class ChangeQueue:
    """The changed paths waiting for the next run, coalesced; safe across threads."""

    def __init__(self) -> None:
        self._paths: set[str] = set()
        self._changed = threading.Condition()

    def add(self, paths: Iterable[str]) -> None:
        with self._changed:
            self._paths.update(paths)
            if self._paths:
                self._changed.notify_all()

    def take(self, timeout: float) -> list[str]:
        """Every queued path, sorted, leaving the queue empty; waits up to `timeout` seconds
        for one ([] if none came)."""
        with self._changed:
            self._changed.wait_for(lambda: bool(self._paths), timeout)
            paths = sorted(self._paths)
            self._paths.clear()
            return paths

    def __len__(self) -> int:
        with self._changed:
            return len(self._paths)


class FolderWatcher:
    """A thread that adds the changed paths under `root` to `queue` until stopped."""

    def __init__(
        self, root: Path, scan: ScanSettings, settings: WatchSettings, queue: ChangeQueue
    ) -> None:
        self.root = root.resolve()
        self.scan = scan
        self.settings = settings
        self.queue = queue
        self.error: BaseException | None = None
        self._watching = threading.Event()  # set once watchfiles has its watches in place
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="folder-watcher", daemon=True)

    def start(self, timeout: float = 60) -> None:
        """Start watching; returns once every change from now on is seen (WatchError if the
        folder cannot be watched)."""
        self._thread.start()
        if not self._watching.wait(timeout):
            raise WatchError(f"watching {self.root} did not start within {timeout:g} s")
        self.check()

    def check(self) -> None:
        """WatchError if the thread has stopped watching because of an error."""
        if self.error is not None:
            raise WatchError(f"cannot watch {self.root}: {self.error}") from self.error

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        step_ms = max(1, round(self.settings.debounce * 1000))
        try:
            for changes in watchfiles.watch(
                self.root,
                watch_filter=None,  # changed_path filters, by the scan's rules
                debounce=step_ms * MAX_GROUPING,
                step=step_ms,
                stop_event=self._stop,
                rust_timeout=WAKE_MS,
                yield_on_timeout=True,  # an empty set: the first one says the watch is set up
                raise_interrupt=False,
            ):
                self._watching.set()
                paths = (changed_path(self.root, path, self.scan) for _, path in changes)
                self.queue.add(path for path in paths if path is not None)
        except Exception as exc:  # noqa: BLE001 - handed to the loop, which reports it
            self.error = exc
        finally:
            self._watching.set()


def keep_live(
    watcher: FolderWatcher,
    run: Callable[[list[str] | None], object],
    stop: threading.Event,
    idle_check_s: float = 1.0,
) -> None:
    """Run `run(None)` (a full reconcile), then `run(paths)` with the queued paths whenever
    there are some, one run at a time, until `stop` is set. A reconcile that raises ends the
    loop with its error; a later run that raises is logged and its paths go back in the
    queue, tried again after RETRY_S. WatchError when the watcher stops watching."""
    run(None)
    while not stop.is_set():
        watcher.check()
        paths = watcher.queue.take(idle_check_s)
        if not paths:
            continue
        try:
            run(paths)
        except Exception:  # noqa: BLE001 - the paths are kept for the next try
            log.exception("a run of %d changed paths failed; retrying in %g s", len(paths), RETRY_S)
            watcher.queue.add(paths)
            stop.wait(RETRY_S)
