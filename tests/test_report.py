"""Artifacts and terminal progress of ingest runs (tasks/report.py).

Unit tests on the table builders and the on/off rules of the terminal bar; integration tests run
the ingest flow through the real engine and read its artifacts back from the Prefect API, and
run the command line on a pseudo-terminal.
"""

from __future__ import annotations

import io
import json
import logging
import os
import pty
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import lancedb
import pytest

from flows.ingest import ingest
from tasks.core.reasons import Reason
from tasks.dataset.location import DEFAULT_INDEX_URI
from tasks.dataset.schema import CHUNKS_TABLE
from tasks.ingest import report
from tasks.ingest.report import (
    FAILURES_KEY,
    PROGRESS_KEY,
    SUMMARY_KEY,
    RunProgress,
    failure_rows,
    publish_summary,
    restore_command,
    summary_description,
    summary_rows,
    terminal_progress,
)
from tasks.ingest.summary import FileProblem, IngestSummary

from .conftest import ROOT, SAMPLE

MARKDOWN = ("ch04-01-what-is-ownership.md", "ch08-03-hash-maps.md")
ANSI_CODE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # colours, cursor moves
NOT_A_PDF = "file has a .pdf name but no PDF header"  # the loader's message


def finished_summary() -> IngestSummary:
    return IngestSummary(
        index_uri="/data/index",
        files_seen=9,
        unchanged=3,
        indexed=4,
        failed=[FileProblem("docs/broken.pdf", Reason.NOT_A_PDF, "no PDF header")],
        empties=[FileProblem("notes/empty.md", Reason.EMPTY_FILE, "0 bytes")],
        removed=2,
        chunks_written=40,
        chunks_embedded=30,
        chunks_reused=10,
        chunks_deleted=7,
        commits=2,
        ocr_pages=4,
        ocr_seconds=21.0,
        table_version=12,
        run_tag="run-20261130T071408541204Z",
        seconds=3.14159,
        stage_seconds={"discover": 0.123, "load (waiting)": 1.5, "embed": 0.75},
    )


def test_summary_rows_give_every_count_stage_and_the_dataset_version():
    rows = summary_rows(finished_summary())
    assert all(list(row) == ["measure", "value"] for row in rows)
    assert {row["measure"]: row["value"] for row in rows} == {
        "files seen": 9,
        "files indexed": 4,
        "files unchanged": 3,
        "files empty": 1,
        "files failed": 1,
        "files removed": 2,
        "files waiting": 0,
        "chunks written": 40,
        "chunks embedded": 30,
        "chunks cached": 0,
        "chunks reused": 10,
        "chunks deleted": 7,
        "ocr pages": 4,
        "ocr seconds": 21.0,
        "ocr seconds per page": 5.25,
        "seconds discover": 0.12,
        "seconds load (waiting)": 1.5,
        "seconds embed": 0.75,
        "seconds total": 3.14,
        "chunk commits": 2,
        "dataset tag": "run-20261130T071408541204Z",
        "chunks table version": 12,
    }


def test_failure_rows_give_the_reason_and_the_message():
    failed = [
        FileProblem("docs/broken.pdf", Reason.NOT_A_PDF, NOT_A_PDF),
        FileProblem("a.md", Reason.BATCH_FAILED, "OSError: disk full: /data"),
        FileProblem("gone.txt", Reason.VANISHED, ""),
    ]
    assert failure_rows(failed) == [
        {"file": "docs/broken.pdf", "reason": "not_a_pdf", "message": NOT_A_PDF},
        {"file": "a.md", "reason": "batch_failed", "message": "OSError: disk full: /data"},
        {"file": "gone.txt", "reason": "vanished", "message": ""},
    ]
    assert failure_rows([]) == []


def broken_api(**kwargs):
    raise ConnectionError("the Prefect API is gone")


def not_called(**kwargs):
    pytest.fail(f"unexpected call with {kwargs}")


def test_the_restore_command_names_the_dataset_unless_it_is_the_default(tmp_path, monkeypatch):
    tag = "run-20261130T071408541204Z"

    def command(index_uri: str) -> str:
        summary = IngestSummary(index_uri=index_uri, run_tag=tag)
        assert f"(`{restore_command(summary)}` makes this state current again)" in (
            summary_description(summary)
        )
        return restore_command(summary)

    assert command(DEFAULT_INDEX_URI) == f"python -m flows.restore {tag}"
    assert (
        command("s3://bucket/my index")
        == f"python -m flows.restore {tag} --index 's3://bucket/my index'"
    )
    monkeypatch.chdir(tmp_path)  # a relative --index: the command works from any folder
    assert command("other") == f"python -m flows.restore {tag} --index {tmp_path / 'other'}"


def test_artifact_errors_are_logged_as_warnings_and_never_raise(monkeypatch, caplog):
    monkeypatch.setattr(report, "create_table_artifact", broken_api)
    monkeypatch.setattr(report, "create_progress_artifact", broken_api)
    monkeypatch.setattr(report, "update_progress_artifact", not_called)  # nothing to update
    logger = logging.getLogger("test-report")
    summary = finished_summary()
    with caplog.at_level(logging.WARNING, logger="test-report"):
        progress = RunProgress(5, logger)
        progress.update(summary)
        publish_summary(summary, logger)
    assert progress.artifact_id is None
    monkeypatch.setattr(report, "create_progress_artifact", not_called)
    assert RunProgress(0, logger).artifact_id is None, "no file to index: no progress artifact"
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [
        f"could not publish the {key} artifact: ConnectionError: the Prefect API is gone"
        for key in (PROGRESS_KEY, SUMMARY_KEY, FAILURES_KEY)
    ]


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("tty", "ci", "drawn"),
    [(False, None, False), (True, "true", False), (True, None, True)],
    ids=["not-a-terminal", "terminal-in-ci", "terminal"],
)
def test_the_terminal_bar_is_drawn_only_on_a_terminal_outside_ci(monkeypatch, tty, ci, drawn):
    monkeypatch.setattr(report, "create_progress_artifact", lambda **kwargs: "artifact-id")
    monkeypatch.setattr(report, "update_progress_artifact", lambda **kwargs: None)
    monkeypatch.setattr(sys, "stderr", FakeTerminal() if tty else io.StringIO())
    if ci:
        monkeypatch.setenv("CI", ci)
    else:
        monkeypatch.delenv("CI", raising=False)
    summary = IngestSummary(
        index_uri="x", indexed=2, empties=[FileProblem("e.md", Reason.EMPTY_FILE, "")]
    )
    summary.chunks_written = 17
    with terminal_progress():
        progress = RunProgress(4, logging.getLogger("test-report"))
        progress.update(summary)
        if drawn:
            (task,) = progress.terminal.tasks
            assert (task.completed, task.total, task.fields["chunks"]) == (3, 4, 17)
        else:
            assert progress.terminal is None
    assert RunProgress(4, logging.getLogger("test-report")).terminal is None, "only inside"


def make_corpus(root: Path) -> Path:
    """Two real Markdown files, an empty one and a broken PDF."""
    root.mkdir(parents=True)
    for name in MARKDOWN:
        shutil.copyfile(SAMPLE / "rust-book" / name, root / name)
    (root / "empty.md").write_text("")
    (root / "broken.pdf").write_bytes(b"not a pdf")
    return root


def read_artifacts(flow_run_id) -> dict[str, object]:
    """The artifacts of one flow run by key, read back from the Prefect API."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    only_run = ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
    with get_client(sync_client=True) as client:
        return {a.key: a for a in client.read_artifacts(artifact_filter=only_run)}


@pytest.mark.integration
def test_an_ingest_run_publishes_its_summary_failures_and_progress(prefect_backend, tmp_path):
    corpus, uri = make_corpus(tmp_path / "corpus"), str(tmp_path / "index")
    state = ingest(
        source_dir=str(corpus), index_uri=uri, model="hash", batch_size=1, return_state=True
    )
    summary = state.result()
    artifacts = read_artifacts(state.state_details.flow_run_id)
    assert sorted(artifacts) == sorted([SUMMARY_KEY, FAILURES_KEY, PROGRESS_KEY])

    table = json.loads(artifacts[SUMMARY_KEY].data)
    counts = {row["measure"]: row["value"] for row in table}
    chunks_in_table = lancedb.connect(uri).open_table(CHUNKS_TABLE).count_rows()
    assert counts["files seen"] == 4
    assert (counts["files indexed"], counts["files empty"], counts["files failed"]) == (2, 1, 1)
    assert counts["chunks written"] == counts["chunks embedded"] == chunks_in_table > 0
    assert (counts["dataset tag"], counts["chunks table version"]) == (
        summary.run_tag,
        summary.table_version,
    )
    assert "**1 file(s) failed.**" in artifacts[SUMMARY_KEY].description
    assert f"python -m flows.restore {summary.run_tag} --index {uri}`" in (
        artifacts[SUMMARY_KEY].description
    )

    failures = json.loads(artifacts[FAILURES_KEY].data)
    assert failures == [{"file": "broken.pdf", "reason": "not_a_pdf", "message": NOT_A_PDF}]
    assert artifacts[PROGRESS_KEY].data == 100
    assert artifacts[PROGRESS_KEY].description == (
        f"4 of 4 files to index done, {chunks_in_table} chunks written."
    )


def run_on_a_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """Run a command with stderr on a pseudo-terminal: (status, stdout, terminal text)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        args, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=follower
    )
    os.close(follower)
    received: list[bytes] = []

    def read_terminal() -> None:
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the command and its children closed the terminal
                return
            if not data:
                return
            received.append(data)

    reader = threading.Thread(target=read_terminal, daemon=True)
    reader.start()
    try:
        stdout, _ = proc.communicate(timeout=600)
    finally:
        proc.kill()
        reader.join(timeout=30)
        os.close(leader)
    terminal = ANSI_CODE.sub("", b"".join(received).decode(errors="replace"))
    return proc.returncode, stdout.decode(), terminal


@pytest.mark.integration
@pytest.mark.parametrize(("ci", "drawn"), [(None, True), ("1", False)], ids=["terminal", "ci"])
def test_the_command_line_draws_progress_on_a_terminal_unless_in_ci(
    subprocess_env, tmp_path, ci, drawn
):
    corpus = make_corpus(tmp_path / "corpus")
    env = {k: v for k, v in subprocess_env.items() if k != "CI"} | ({"CI": ci} if ci else {})
    status, stdout, terminal = run_on_a_terminal(
        [sys.executable, "-m", "flows.ingest", str(corpus), "--index", str(tmp_path / "index")]
        + ["--model", "hash", "--batch-size", "1"],
        env | {"COLUMNS": "120"},
    )
    assert status == 2, stdout + terminal  # broken.pdf failed, the run completed
    assert "files: 4 seen, 2 indexed, 0 unchanged, 1 empty, 1 failed" in stdout
    assert "Finished in state Completed('1 file(s) failed')" in terminal, "logs still shown"
    bar = "indexing" in terminal and "4/4 files" in terminal and "files/s" in terminal
    assert bar == drawn, terminal[-3000:]
