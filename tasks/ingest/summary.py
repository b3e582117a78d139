"""What one ingest run did: counted as batches finish, rendered for the terminal, the run log
and the Prefect artifacts from the same measures."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

from tasks.core.reasons import Reason, Status
from tasks.core.records import Document
from tasks.ingest.discover import Plan, Waiting
from tasks.ingest.pipeline import BatchOutcome


@dataclass(frozen=True)
class FileProblem:
    """A file that ended empty or failed, and why."""

    doc_id: str
    reason: Reason
    message: str

    def __str__(self) -> str:
        return f"{self.doc_id}: {self.reason}: {self.message}"


@dataclass
class GateOutcome:
    """Search quality on the --gate questions before and after a run (hybrid nDCG@10)."""

    after: float
    before: float | None  # the previous run's version; None when there was none
    previous_tag: str | None
    max_drop: float
    restored: bool = False  # the previous version was made current again

    @property
    def failed(self) -> bool:
        return self.before is not None and self.before - self.after > self.max_drop

    def describe(self) -> str:
        before = "no previous version" if self.before is None else f"{self.before:.4f} before"
        verdict = (
            f"search got worse by more than {self.max_drop:g}: {self.previous_tag} restored"
            if self.restored
            else "search got worse"
            if self.failed
            else "kept"
        )
        return f"gate: nDCG@10 {before}, {self.after:.4f} after: {verdict}"

    def measures(self) -> dict[str, object]:
        return {
            "gate nDCG@10 before": "" if self.before is None else round(self.before, 4),
            "gate nDCG@10 after": round(self.after, 4),
            "gate allowed drop": self.max_drop,
            "gate restored": self.previous_tag if self.restored else "",
        }


@dataclass
class IngestSummary:
    """What one ingest run did; the flow's return value."""

    index_uri: str
    files_seen: int = 0
    unchanged: int = 0
    indexed: int = 0
    failed: list[FileProblem] = field(default_factory=list)
    empties: list[FileProblem] = field(default_factory=list)
    waiting: list[FileProblem] = field(default_factory=list)  # failed, not tried (back-off)
    removed: int = 0
    kept_unseen: int = 0  # not seen, but under a folder that could not be listed
    files_to_index: int = 0
    chunks_written: int = 0
    chunks_embedded: int = 0
    chunks_cached: int = 0  # vectors the embed step's cache gave (a --rebuild's, say)
    chunks_reused: int = 0
    chunks_deleted: int = 0
    chunks_refit: int = 0
    chunks_truncated: int = 0
    commits: int = 0  # commits that wrote batches of chunks
    ocr_pages: int = 0  # pages of this run's documents read by OCR
    ocr_seconds: float = 0.0  # time OCR took on this run's documents (pages without text read)
    max_tokens: int = 0
    table_version: int = 0
    run_tag: str = ""
    seconds: float = 0.0
    stage_seconds: dict[str, float] = field(default_factory=dict)
    first_forward_pass: float | None = None  # seconds from process start, if this one embedded
    gate: GateOutcome | None = None  # with --gate, after a run that changed the dataset

    @property
    def empty(self) -> int:
        return len(self.empties)

    @property
    def files_done(self) -> int:
        """Files of this run's batches that ended indexed, empty or failed, for progress."""
        return self.indexed + self.empty + len(self.failed)

    @property
    def outcome(self) -> str:
        """The flow run's state message."""
        if self.gate is not None and self.gate.failed:
            return self.gate.describe()
        outcome = f"{len(self.failed)} file(s) failed" if self.failed else "no file failed"
        if self.waiting:
            outcome += f" ({len(self.waiting)} failed before, waiting for their retry)"
        return outcome

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Add the time spent inside the block to `stage`."""
        start = time.perf_counter()
        try:
            yield
        finally:
            seconds = time.perf_counter() - start
            self.stage_seconds[stage] = self.stage_seconds.get(stage, 0.0) + seconds

    def add_plan(self, plan: Plan) -> None:
        self.files_seen, self.unchanged = plan.files_seen, len(plan.unchanged)
        self.files_to_index, self.kept_unseen = len(plan.to_index), len(plan.kept_unseen)
        self.waiting = [_waiting(file) for file in plan.waiting]

    def add_documents(self, documents: list[Document]) -> None:
        """Count the outcome of a batch's documents."""
        for doc in documents:
            self.ocr_pages += len(doc.ocr_pages)
            self.ocr_seconds += doc.ocr_seconds
            if doc.status == Status.INDEXED:
                self.indexed += 1
                continue
            problem = FileProblem(doc.doc_id, doc.reason or Reason.PARSE_ERROR, doc.message)
            (self.failed if doc.status == Status.FAILED else self.empties).append(problem)

    def add_batch(self, outcome: BatchOutcome) -> None:
        """Count a finished batch: its documents and the chunks it wrote."""
        self.add_documents(outcome.documents)
        if outcome.vectors is not None:
            self.chunks_written += outcome.chunks_written
            self.chunks_embedded += outcome.vectors.embedded
            self.chunks_cached += outcome.vectors.cached
            self.chunks_reused += outcome.vectors.reused
        self.chunks_refit += sum(result.refit for result in outcome.splits)
        self.chunks_truncated += sum(result.over_window for result in outcome.splits)
        self.commits += outcome.ends_commit

    # -- the measures, named once; every rendering below reads them -------------------------

    def file_counts(self) -> dict[str, int]:
        return {
            "seen": self.files_seen,
            "indexed": self.indexed,
            "unchanged": self.unchanged,
            "empty": self.empty,
            "failed": len(self.failed),
            "removed": self.removed,
            "waiting": len(self.waiting),
        }

    def chunk_counts(self) -> dict[str, int]:
        return {
            "written": self.chunks_written,
            "embedded": self.chunks_embedded,
            "cached": self.chunks_cached,
            "reused": self.chunks_reused,
            "deleted": self.chunks_deleted,
        }

    def ocr_counts(self) -> dict[str, float]:
        per_page = self.ocr_seconds / self.ocr_pages if self.ocr_pages else 0.0
        return {
            "pages": self.ocr_pages,
            "seconds": round(self.ocr_seconds, 2),
            "seconds per page": round(per_page, 2),
        }

    def measures(self) -> dict[str, object]:
        """Every figure of the run, one per row of the summary artifact."""
        return {
            **{f"files {name}": n for name, n in self.file_counts().items()},
            **{f"chunks {name}": n for name, n in self.chunk_counts().items()},
            **{f"ocr {name}": n for name, n in self.ocr_counts().items()},
            **{f"seconds {stage}": round(s, 2) for stage, s in self.stage_seconds.items()},
            "seconds total": round(self.seconds, 2),
            "chunk commits": self.commits,
            **(
                {}
                if self.first_forward_pass is None
                else {"seconds to first forward pass": round(self.first_forward_pass, 2)}
            ),
            "dataset tag": self.run_tag,
            "chunks table version": self.table_version,
            **({} if self.gate is None else self.gate.measures()),
        }

    def counts_line(self) -> str:
        """ "5 seen, 5 indexed, …; 80 chunks written (…)": the run in one line."""
        files = ", ".join(f"{n} {name}" for name, n in self.file_counts().items())
        written, *rest = self.chunk_counts().items()
        chunks = ", ".join(f"{n} {name}" for name, n in rest)
        return f"files: {files}; chunks: {written[1]} written ({chunks})"

    def render(self) -> str:
        """The summary the command line prints."""
        stages = ", ".join(f"{name} {secs:.1f}" for name, secs in self.stage_seconds.items())
        embed_seconds = self.stage_seconds.get("embed", 0)
        rate = self.chunks_embedded / embed_seconds if embed_seconds else 0
        tag = self.run_tag or "none: nothing changed"
        lines = [
            f"index: {self.index_uri} (chunks table version {self.table_version}, tag {tag})",
            self.counts_line(),
            f"window: {self.chunks_refit} chunks re-split to fit the {self.max_tokens}-token "
            f"window, {self.chunks_truncated} would be truncated",
            f"time: {self.seconds:.1f} s ({stages}); {self.commits} commits; "
            f"embed {rate:.1f} chunks/s",
        ]
        if self.first_forward_pass is not None:
            lines[-1] += f"; first forward pass {self.first_forward_pass:.1f} s after start"
        if self.ocr_pages or self.ocr_seconds:
            ocr = self.ocr_counts()
            lines.append(
                f"ocr: {ocr['pages']} pages read in {ocr['seconds']:.1f} s "
                f"({ocr['seconds per page']:.1f} s per page)"
            )
        if self.gate is not None:
            lines.append(self.gate.describe())
        lines += [f"failed: {problem}" for problem in self.failed]
        lines += [f"empty: {problem}" for problem in self.empties]
        lines += [f"waiting: {problem}" for problem in self.waiting]
        return "\n".join(lines)


def _waiting(file: Waiting) -> FileProblem:
    """A failed file the run did not try, with when a run tries it again."""
    due = datetime.fromtimestamp(file.due_us / 1e6, UTC)
    message = (
        f"failed {file.attempts} times in a row, bytes unchanged: tried again from "
        f"{due:%Y-%m-%d %H:%M} UTC (or with --retry-failed)"
    )
    return FileProblem(file.source.doc_id, file.reason or Reason.PARSE_ERROR, message)
