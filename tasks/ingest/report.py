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

import os
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from prefect.artifacts import (
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
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

from tasks.core.artifacts import Logger, publish_artifact
from tasks.core.prefect_compat import log_console
from tasks.dataset.location import DEFAULT_INDEX_URI, local_path
from tasks.ingest.summary import FileProblem, IngestSummary

SUMMARY_KEY = "ingest-summary"
FAILURES_KEY = "ingest-failures"
PROGRESS_KEY = "ingest-progress"
RATE_WINDOW_S = 600  # the rate and ETA follow the last ten minutes (batches can be slow)

_TERMINAL: ContextVar[Progress | None] = ContextVar("ingest_terminal_progress", default=None)


def summary_rows(summary: IngestSummary) -> list[dict[str, Any]]:
    """The summary table, one measure per row: it reads top to bottom like the run's output."""
    return [{"measure": measure, "value": value} for measure, value in summary.measures().items()]


def failure_rows(failed: list[FileProblem]) -> list[dict[str, str]]:
    """The failures table: the file (relative to the source folder), its reason and message."""
    return [{"file": p.doc_id, "reason": str(p.reason), "message": p.message} for p in failed]


def summary_description(summary: IngestSummary) -> str:
    """Markdown above the summary table: the outcome in one sentence and how to restore it."""
    failed = f"**{len(summary.failed)} file(s) failed.** " if summary.failed else ""
    described = (
        f"{failed}Ingest into `{summary.index_uri}` in {summary.seconds:.1f} s: "
        f"{summary.counts_line()}."
    )
    if not summary.run_tag:
        return described + " Nothing changed, so the dataset's version stays as it was."
    return (
        f"{described} Dataset tag `{summary.run_tag}` "
        f"(`{restore_command(summary)}` makes this state current again)."
    )


def restore_command(summary: IngestSummary) -> str:
    """The command that makes the run's tagged state current again, to paste as it is: with
    `--index` unless the dataset is the default one (a local dataset by its absolute path)."""
    folder = local_path(summary.index_uri)
    uri = str(folder.resolve()) if folder is not None else summary.index_uri
    index = "" if uri == DEFAULT_INDEX_URI else f" --index {shlex.quote(uri)}"
    return f"python -m flows.restore {summary.run_tag}{index}"


def failures_description(summary: IngestSummary) -> str:
    """Markdown above the failures table."""
    if not summary.failed:
        return "No file failed in this run."
    return (
        f"**{len(summary.failed)} file(s) failed**; later runs try them again (the next run, "
        "then, while a file's bytes do not change, after 1, 2, 4, ... hours). "
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


class RunProgress:
    """How many of a run's files to index are done, as a progress artifact and a terminal bar.

    A file is done when its batch is, whatever its outcome (indexed, empty or failed). The
    terminal bar is drawn only inside the command line's `terminal_progress()`. A run with
    no file to index has no progress to show: no artifact (one API call less).
    """

    def __init__(self, total_files: int, logger: Logger) -> None:
        self.total_files = total_files
        self.logger = logger
        self.artifact_id = None
        if total_files:
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
    console = log_console()
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
