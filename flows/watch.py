"""Watch: keep the index of a folder live, each saved change searchable within seconds.

    python -m flows.watch DIR [--index URI] [--debounce SECONDS] [ingest options]

A warm process. It starts watching DIR, runs a full reconcile (an ingest run of the whole
folder, which catches what changed while nothing watched), then turns every debounced group
of file events into an ingest run restricted to the changed paths (the `paths` option,
tasks/ingest/discover.py: nothing else is listed or hashed). Runs go one at a time; what
changes during a run waits in a queue and makes the next run (tasks/ingest/watch.py). Hidden
files, editor temp files and `--exclude` names are ignored, as a scan ignores them. The
model and the parser process stay loaded between runs. One line per run is printed; Ctrl-C
stops watching.

How it fits Prefect: each run is an ordinary run of the `ingest` flow, in this process,
named `watch: reconcile` or `watch: N changed paths` and tagged `watch`; its `paths`
parameter lists what changed, so the UI shows why it started. (A Prefect event per change
and a deployment trigger would start each run in a new process, which then imports its
libraries and loads the model: seconds that a change searchable within 3 s cannot spend.)
Runs on one dataset never overlap: this process runs one at a time, and the dataset's ingest
lock keeps them apart from other runs on it (`deployments.serve`'s schedule, a manual
`flows.ingest`).

Like `flows.ingest`, it starts a temporary Prefect API server where none is configured
(flows/temporary_server.py), once its arguments are read and before Prefect is imported.
Exit status: 0 when stopped, 1 when the folder cannot be watched, the dataset cannot be used
or the first (reconcile) run fails.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from flows import temporary_server
from flows.cli import exit_process, exit_status
from flows.temporary_server import TemporaryServer
from tasks.core.options import add_options, parse_options
from tasks.dataset.location import DatasetError
from tasks.dataset.object_store import is_object_url
from tasks.embed.models import get_embedder, model_info
from tasks.ingest.discover import ScanSettings
from tasks.ingest.load import process_parsers
from tasks.ingest.settings import IngestSettings, resolve_auto_model
from tasks.ingest.summary import IngestSummary
from tasks.ingest.watch import ChangeQueue, FolderWatcher, WatchError, WatchSettings, keep_live

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WatchRun:
    """One finished run of the watcher: its number, the paths it was given, what it did."""

    number: int
    paths: list[str] | None  # None: the reconcile run, the whole folder
    summary: IngestSummary

    def describe(self) -> str:
        what = "reconcile" if self.paths is None else f"{len(self.paths)} changed paths"
        return (
            f"watch: run {self.number} ({what}) in {self.summary.seconds:.2f} s: "
            f"{self.summary.counts_line()}"
        )


def print_run(run: WatchRun) -> None:
    print(run.describe(), flush=True)


def ingest_runner(
    settings: IngestSettings, report: Callable[[WatchRun], None] = print_run
) -> Callable[[list[str] | None], IngestSummary]:
    """A function that runs the `ingest` flow in this process on `paths` (None: the whole
    folder), reports the run and returns its summary; it raises when the run crashed.
    `settings.rebuild` applies to the first run only."""
    from prefect import tags  # Prefect, and with it the flow, only once the server starts

    from flows.ingest_flow import ingest

    numbers = itertools.count(1)

    def run(paths: list[str] | None) -> IngestSummary:
        number = next(numbers)
        rebuild = settings.rebuild and number == 1
        options = settings.options() | {"paths": paths, "rebuild": rebuild}
        name = "watch: reconcile" if paths is None else f"watch: {len(paths)} changed paths"
        with tags("watch"):
            state = ingest.with_options(flow_run_name=name)(**options, return_state=True)
        summary = state.result(raise_on_failure=False)
        if isinstance(summary, BaseException):
            raise summary
        report(WatchRun(number, paths, summary))
        return summary

    return run


def keep_warm(settings: IngestSettings) -> threading.Thread:
    """Load the model and start the parser processes in the background now, whether or not
    the reconcile needs them: the first change must not wait for them."""

    def warm() -> None:
        try:
            get_embedder(settings.model)
            process_parsers(model_info(settings.model).busy_cores).start()  # the runs' loads
        except Exception:  # noqa: BLE001 - the run meets the same error and reports it
            log.debug("warm-up failed", exc_info=True)

    thread = threading.Thread(target=warm, name="warm-up", daemon=True)
    thread.start()
    return thread


def watch_folder(
    settings: IngestSettings,
    watch: WatchSettings,
    stop: threading.Event,
    server: TemporaryServer | None = None,
    report: Callable[[WatchRun], None] = print_run,
) -> None:
    """Keep `settings.index_uri` live with `settings.source_dir` until `stop` is set: watch,
    reconcile, then a run of the changed paths whenever there are some (tasks/ingest/watch.py,
    `keep_live`). `server`, where this process started one, is waited for before the first
    run."""
    chosen = resolve_auto_model(settings)  # once: every run and the warm-up use its spec
    keep_warm(chosen)
    queue = ChangeQueue()
    watcher = FolderWatcher(Path(chosen.source_dir), chosen.narrow(ScanSettings), watch, queue)
    watcher.start()
    try:
        if server is not None:
            server.wait_until_ready()
        keep_live(watcher, ingest_runner(chosen, report), stop)
    finally:
        watcher.stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m flows.watch", description=(__doc__ or "").split("\n")[0]
    )
    add_options(parser, IngestSettings, exclude=("paths",))  # the watcher sets the paths
    add_options(parser.add_argument_group("watch"), WatchSettings)
    parsed = parser.parse_args(args)
    settings = parse_options(parser, parsed, IngestSettings)
    if is_object_url(settings.source_dir):  # no file events from a bucket
        parser.error(
            f"{settings.source_dir} is in an object store, which cannot be watched: run "
            "`python -m flows.ingest` on a schedule instead (the `ingest` deployment's cron)"
        )
    settings = settings.model_copy(update={"source_dir": str(Path(settings.source_dir).resolve())})
    watch = parse_options(parser, parsed, WatchSettings)
    server = temporary_server.start()  # once the arguments hold (its modules are imported)

    def command() -> int:
        print(
            f"watch: {settings.source_dir} -> {settings.index_uri} (Ctrl-C stops)", file=sys.stderr
        )
        try:
            watch_folder(settings, watch, threading.Event(), server)
        except KeyboardInterrupt:
            print("watch: stopped", file=sys.stderr)
        except WatchError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except DatasetError:
            raise  # exit_status reports it
        except Exception as exc:  # noqa: BLE001 - the reconcile run failed; Prefect logged why
            print(f"error: the reconcile run failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        return 0

    return exit_status(command)


if __name__ == "__main__":
    exit_process(main())
