"""What an ingest run shows while it runs and when it is done: Prefect artifacts and a terminal bar.

Artifacts, under stable keys so that the Prefect UI keeps a history per key:
- `ingest-summary`: files per status, chunks, seconds per stage, the dataset tag and version;
- `ingest-failures`: one row per failed file (file, reason, message), empty when none failed;
- `ingest-progress`: the share of the files to index that are done, updated after each batch.

Publishing never fails a run: an artifact that cannot be written is logged as a warning.

The terminal bar belongs to the command line: `python -m flows.ingest` opens `terminal_progress()`
around the flow call, and the flow's `RunProgress` draws into it when it is there. Deployment
runs, tests and other callers of the flow never open it, so they stay quiet even when their
stderr happens to be a terminal; the command line itself stays quiet in CI and when stderr is
not a terminal.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from prefect.artifacts import (
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.logging.handlers import PrefectConsoleHandler
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text

if TYPE_CHECKING:
    from flows.ingest import IngestSummary

SUMMARY_KEY = "ingest-summary"
FAILURES_KEY = "ingest-failures"
PROGRESS_KEY = "ingest-progress"
Logger = logging.Logger | logging.LoggerAdapter  # what get_run_logger() returns
RATE_WINDOW_S = 600  # the rate and ETA follow the last ten minutes (batches can be slow)

_TERMINAL: ContextVar[Progress | None] = ContextVar("ingest_terminal_progress", default=None)


def summary_rows(summary: IngestSummary) -> list[dict[str, Any]]:
    """The summary table, one measure per row: it reads top to bottom like the run's output."""
    values = {
        "files seen": summary.files_seen,
        "files indexed": summary.indexed,
        "files unchanged": summary.unchanged,
        "files empty": summary.empty,
        "files failed": len(summary.failed),
        "files removed": summary.removed,
        "chunks written": summary.chunks_written,
        "chunks embedded": summary.chunks_embedded,
        "chunks reused": summary.chunks_reused,
        "chunks deleted": summary.chunks_deleted,
        **{f"seconds {stage}": round(secs, 2) for stage, secs in summary.stage_seconds.items()},
        "seconds total": round(summary.seconds, 2),
        "dataset tag": summary.run_tag,
        "chunks table version": summary.table_version,
    }
    return [{"measure": measure, "value": value} for measure, value in values.items()]


def split_error(error: str) -> tuple[str, str]:
    """A ledger error "reason: message" as (reason, message); the message may contain ": "."""
    reason, _, message = error.partition(": ")
    return reason, message


def failure_rows(failed: list[tuple[str, str]]) -> list[dict[str, str]]:
    """The failures table: the file (relative to the source folder), its reason and message."""
    rows = []
    for doc_id, error in failed:
        reason, message = split_error(error)
        rows.append({"file": doc_id, "reason": reason, "message": message})
    return rows


def summary_description(summary: IngestSummary) -> str:
    """Markdown above the summary table: the outcome in one sentence and how to restore it."""
    return (
        f"Ingest into `{summary.index_uri}`: {summary.indexed} indexed, "
        f"{summary.unchanged} unchanged, {summary.empty} empty, **{len(summary.failed)} failed**, "
        f"{summary.removed} removed; {summary.chunks_written} chunks written in "
        f"{summary.seconds:.1f} s. Dataset tag `{summary.run_tag}` "
        f"(`python -m flows.restore {summary.run_tag}` makes this state current again)."
    )


def failures_description(summary: IngestSummary) -> str:
    """Markdown above the failures table."""
    if not summary.failed:
        return "No file failed in this run."
    return (
        f"**{len(summary.failed)} file(s) failed**; they are retried on the next run. "
        "*reason* is the short cause (e.g. `not_a_pdf`, `parse_timeout`), *message* the detail."
    )


def publish_summary(summary: IngestSummary, logger: Logger) -> None:
    """Publish the summary and failures tables of a finished run."""
    publish_artifact(
        logger,
        create_table_artifact,
        key=SUMMARY_KEY,
        table=summary_rows(summary),
        description=summary_description(summary),
    )
    publish_artifact(
        logger,
        create_table_artifact,
        key=FAILURES_KEY,
        table=failure_rows(summary.failed),
        description=failures_description(summary),
    )


def publish_artifact(logger: Logger, call: Callable[..., Any], **kwargs: Any) -> Any:
    """Call a Prefect artifact function; a failure is a warning, never a failed run."""
    try:
        return call(**kwargs)
    except Exception as exc:  # noqa: BLE001 - an artifact reports on the run, it is not the run
        what = kwargs.get("key", PROGRESS_KEY)  # a progress update names the artifact by id
        logger.warning("could not publish the %s artifact: %s: %s", what, type(exc).__name__, exc)
        return None


class RunProgress:
    """How many of a run's files to index are done, as a progress artifact and a terminal bar.

    A file is done when its batch is, whatever its outcome (indexed, empty or failed). The
    terminal bar is drawn only inside the command line's `terminal_progress()`.
    """

    def __init__(self, total_files: int, logger: Logger) -> None:
        self.total_files = total_files
        self.logger = logger
        self.artifact_id = publish_artifact(
            logger,
            create_progress_artifact,
            key=PROGRESS_KEY,
            progress=self.percent(0),
            description=self.describe(0, 0),
        )
        self.terminal = _TERMINAL.get()
        if self.terminal is not None:
            self.task_id = self.terminal.add_task("indexing", total=total_files, chunks=0)

    def percent(self, files_done: int) -> float:
        return 100.0 * files_done / self.total_files if self.total_files else 100.0

    def describe(self, files_done: int, chunks: int) -> str:
        return f"{files_done} of {self.total_files} files to index done, {chunks} chunks written."

    def update(self, summary: IngestSummary) -> None:
        """Report the files and chunks done so far, after a batch finished."""
        done, chunks = summary.files_done, summary.chunks_written
        if self.artifact_id is not None:
            publish_artifact(
                self.logger,
                update_progress_artifact,
                artifact_id=self.artifact_id,
                progress=self.percent(done),
                description=self.describe(done, chunks),
            )
        if self.terminal is not None:
            self.terminal.update(self.task_id, completed=done, chunks=chunks)


class _FilesPerSecond(ProgressColumn):
    """The recent rate in files per second, blank until two batches have finished."""

    def render(self, task: Task) -> Text:
        return Text(f"{task.speed:.2f} files/s" if task.speed else "")


@contextmanager
def terminal_progress() -> Iterator[None]:
    """Draw ingest runs started inside this block as a progress bar on stderr, for a person.

    Off (a plain pass-through) when stderr is not a terminal or the CI variable is set. The bar
    shares the console of Prefect's log handler, so run log lines scroll above it instead of
    breaking it.
    """
    if not sys.stderr.isatty() or os.environ.get("CI"):
        yield
        return
    handlers = logging.getLogger().handlers
    console = next((h.console for h in handlers if isinstance(h, PrefectConsoleHandler)), None)
    display = Progress(
        TextColumn("{task.description}"),
        # Explicit colours: Prefect's console has its own theme, without rich's bar styles.
        BarColumn(
            style="grey23", complete_style="blue", finished_style="green", pulse_style="blue"
        ),
        MofNCompleteColumn(),
        TextColumn("files, {task.fields[chunks]} chunks"),
        _FilesPerSecond(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console or Console(stderr=True),
        speed_estimate_period=RATE_WINDOW_S,
    )
    token = _TERMINAL.set(display)
    try:
        with display:
            yield
    finally:
        _TERMINAL.reset(token)
