# Over 300 lines: every check of the index against its folder, declared side by side.
"""Does the index match its folder, and is it whole? The checks behind `python -m flows.audit`.

Three comparisons and two inspections, each problem a `Check` declared once below:

- folder ↔ ledger: every supported file is hashed (the audit trusts no size/mtime shortcut)
  and compared with its ledger row;
- ledger ↔ chunks: each indexed document has exactly the chunks the ledger counts, numbered
  0..n−1 with no id twice, and no chunk belongs to a document the ledger does not hold as
  indexed (a failed document keeps its previous chunks on purpose: not a problem);
- vectors: the column's width is the fingerprint's, every vector finite and unit-length;
- pipeline: every ledger row was made with the dataset's fingerprint (model, splitter,
  analyser), and that fingerprint's analyser is this version's;
- indexes: the full-text, key and (from ANN_MIN_ROWS rows) vector indexes exist and cover
  every row.

`repair` fixes what it found in place: rows of unknown documents go, the documents concerned
are marked for re-indexing (their ledger rows lose their fingerprint; those with duplicated
or damaged rows lose those rows first), then one ingest run re-indexes them, adds and removes
what the folder says and rebuilds the indexes; each document is replaced in one commit, as in
any run. Nothing here imports Prefect: the flow is flows/audit_flow.py.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
import pyarrow as pa

from tasks.core.reasons import Status
from tasks.core.records import LedgerEntry, doc_id_of
from tasks.dataset.ann import ANN_MIN_ROWS, vector_index
from tasks.dataset.dataset import Dataset
from tasks.dataset.schema import CHUNKS_TABLE, SEARCH_TEXT_COLUMN, VECTOR_COLUMN, Fingerprint
from tasks.dataset.sql import sql_in
from tasks.dataset.upkeep import KEY_INDEXES
from tasks.ingest.discover import Scan, ScanSettings, discover, is_under
from tasks.text import analysis

NORM_TOLERANCE = 1e-3  # |‖v‖ − 1| above this: not the unit vector every model writes
EXAMPLES = 3  # problems shown per check on the terminal
REPAIR_FINGERPRINT = "audit-repair"  # a ledger fingerprint no run has: re-index this document


class Check(StrEnum):
    """One kind of problem; its `meaning` is what the report says about it."""

    NOT_IN_LEDGER = "not_in_ledger"
    FILE_GONE = "file_gone"
    FILE_CHANGED = "file_changed"
    NO_CHUNKS = "no_chunks"
    CHUNK_COUNT = "chunk_count"
    ORPHAN_CHUNKS = "orphan_chunks"
    DUPLICATE_CHUNK = "duplicate_chunk"
    CHUNK_GAP = "chunk_gap"
    VECTOR_WIDTH = "vector_width"
    BAD_VECTOR = "bad_vector"
    OLD_PIPELINE = "old_pipeline"
    OLD_ANALYSER = "old_analyser"
    MISSING_INDEX = "missing_index"
    UNINDEXED_ROWS = "unindexed_rows"

    @property
    def meaning(self) -> str:
        return _MEANINGS[self]


_MEANINGS = {
    Check.NOT_IN_LEDGER: "a file in the folder that the ledger does not know",
    Check.FILE_GONE: "a ledger row whose file is gone from the folder",
    Check.FILE_CHANGED: "a ledger row whose size, mtime or hash no longer match the file",
    Check.NO_CHUNKS: "an indexed document without chunks",
    Check.CHUNK_COUNT: "a document with another number of chunks than the ledger's",
    Check.ORPHAN_CHUNKS: "chunks of a document the ledger does not hold as indexed",
    Check.DUPLICATE_CHUNK: "a chunk id stored more than once",
    Check.CHUNK_GAP: "a document whose chunk_index is not 0..n-1 or whose chunk_count is off",
    Check.VECTOR_WIDTH: "a vector column of another width than the fingerprint's dimension",
    Check.BAD_VECTOR: "a vector with NaN or infinite values, or not of unit length",
    Check.OLD_PIPELINE: "a document indexed with another model, splitter or analyser",
    Check.OLD_ANALYSER: "a dataset whose full text was analysed by an older analyser",
    Check.MISSING_INDEX: "an index the dataset should have and does not",
    Check.UNINDEXED_ROWS: "rows an index does not cover yet",
}
# The checks that a re-index of the documents concerned repairs (the others: see `repair`).
_BY_REINDEX = frozenset(
    {
        Check.NOT_IN_LEDGER,
        Check.FILE_CHANGED,
        Check.NO_CHUNKS,
        Check.CHUNK_COUNT,
        Check.DUPLICATE_CHUNK,
        Check.CHUNK_GAP,
        Check.BAD_VECTOR,
        Check.OLD_PIPELINE,
    }
)
_DROP_ROWS_FIRST = frozenset({Check.DUPLICATE_CHUNK, Check.CHUNK_GAP, Check.BAD_VECTOR})


@dataclass(frozen=True)
class Problem:
    check: Check
    subject: str  # a doc_id, a chunk_id, an index or column name
    detail: str = ""
    doc_id: str | None = None  # the document to re-index or whose rows to drop, if any


@dataclass
class AuditReport:
    """What an audit found, with the counts it looked at."""

    index_uri: str
    source_dir: str
    problems: list[Problem] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        return not self.problems

    def by_check(self) -> dict[Check, list[Problem]]:
        found: dict[Check, list[Problem]] = defaultdict(list)
        for problem in self.problems:
            found[problem.check].append(problem)
        return {check: found[check] for check in Check if check in found}

    def rows(self, examples: int = EXAMPLES) -> list[dict[str, Any]]:
        """One row per check: its count, meaning and first examples (the table artifact)."""
        return [
            {
                "check": check.value,
                "problems": len(found),
                "meaning": check.meaning,
                "examples": "; ".join(_example(p) for p in found[:examples]),
            }
            for check, found in self.by_check().items()
        ]

    def compared(self) -> str:
        """ "audit of URI against SOURCE: 2 files, 2 ledger rows, 2 chunks" """
        seen = ", ".join(f"{value} {name}" for name, value in self.counts.items())
        return f"audit of {self.index_uri} against {self.source_dir}: {seen}"

    def outcome(self) -> str:
        """The report in one line, for the run's log: what was compared, the count per check."""
        if self.clean:
            return f"{self.compared()}; clean ({self.seconds:.1f} s)"
        checks = ", ".join(
            f"{check.value} {len(found)}" for check, found in self.by_check().items()
        )
        return f"{self.compared()}; {len(self.problems)} problem(s) found: {checks}"

    def render(self, examples: int = EXAMPLES) -> str:
        """The terminal report: what was compared, then each check's count and examples."""
        lines = [self.compared()]
        if self.clean:
            lines.append(f"clean: no problem found ({self.seconds:.1f} s)")
            return "\n".join(lines)
        lines.append(f"{len(self.problems)} problem(s) found ({self.seconds:.1f} s):")
        for row in self.rows(examples):
            lines.append(f"  {row['check']:<16} {row['problems']:>6}  {row['meaning']}")
            lines.append(f"  {'':<16} {'':>6}  e.g. {row['examples']}")
        return "\n".join(lines)


def _example(problem: Problem) -> str:
    return f"{problem.subject} ({problem.detail})" if problem.detail else problem.subject


def audit(dataset: Dataset, source_dir: str, scan: ScanSettings | None = None) -> AuditReport:
    """Every check on `dataset` against the folder `source_dir` (see the module doc)."""
    started = time.perf_counter()
    fp = dataset.fingerprint  # a clear DatasetError for a missing or old dataset
    report = AuditReport(dataset.uri, source_dir)
    found = discover(source_dir, None, scan)  # no ledger given: every file is hashed
    ledger = dataset.ledger()
    documents = _ledger_rows(dataset)
    chunks = _chunk_rows(dataset)
    report.counts = {
        "files": len(found.files),
        "ledger rows": len(ledger),
        "chunks": chunks.num_rows,
    }
    report.problems += folder_vs_ledger(found, ledger)
    report.problems += ledger_vs_chunks(documents, chunks)
    report.problems += pipeline(documents, fp)
    report.problems += vectors(dataset, fp)
    report.problems += indexes(dataset)
    report.seconds = time.perf_counter() - started
    return report


def _ledger_rows(dataset: Dataset) -> dict[str, dict[str, Any]]:
    columns = ["doc_id", "status", "n_chunks", "pipeline_fingerprint"]
    return {row["doc_id"]: row for row in dataset.documents.to_arrow().select(columns).to_pylist()}


def _chunk_rows(dataset: Dataset) -> pa.Table:
    columns = ["chunk_id", "doc_id", "chunk_index", "chunk_count"]
    return dataset.chunks.search().select(columns).limit(None).to_arrow()


def folder_vs_ledger(scan: Scan, ledger: Mapping[str, LedgerEntry]) -> list[Problem]:
    """Files the ledger lacks, ledger rows without a file (unless under a folder that could not
    be listed), and rows whose size, mtime or hash differ from the file's."""
    problems = []
    on_disk = {source.doc_id: source for source in scan.files}
    for doc_id, source in on_disk.items():
        entry = ledger.get(doc_id)
        if entry is None:
            problems.append(Problem(Check.NOT_IN_LEDGER, doc_id, doc_id=doc_id))
            continue
        differ = [
            name
            for name, recorded, actual in (
                ("size", entry.size, source.size),
                ("mtime", entry.mtime_us, source.mtime_us),
                ("hash", entry.content_hash, source.content_hash),
            )
            if recorded != actual
        ]
        if differ:
            problems.append(Problem(Check.FILE_CHANGED, doc_id, ", ".join(differ), doc_id))
    hidden = scan.unreadable_dirs
    for doc_id in sorted(set(ledger) - set(on_disk)):
        if not any(is_under(doc_id, folder) for folder in hidden):
            problems.append(Problem(Check.FILE_GONE, doc_id))
    return problems


def ledger_vs_chunks(documents: Mapping[str, Mapping[str, Any]], chunks: pa.Table) -> list[Problem]:
    """Chunk sets against the ledger: counts, numbering, duplicates, unknown documents."""
    problems = []
    ids = Counter(chunks.column("chunk_id").to_pylist())
    per_doc: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for doc_id, index, count in zip(
        chunks.column("doc_id").to_pylist(),
        chunks.column("chunk_index").to_pylist(),
        chunks.column("chunk_count").to_pylist(),
        strict=True,
    ):
        per_doc[doc_id].append((index, count))
    for chunk_id, times in sorted(ids.items()):
        if times > 1:
            doc_id = doc_id_of(chunk_id)
            problems.append(Problem(Check.DUPLICATE_CHUNK, chunk_id, f"{times} rows", doc_id))
    for doc_id, rows in sorted(per_doc.items()):
        status = documents.get(doc_id, {}).get("status")
        if status not in (Status.INDEXED, Status.FAILED):
            why = "not in the ledger" if status is None else f"ledger status {status}"
            problems.append(Problem(Check.ORPHAN_CHUNKS, doc_id, f"{len(rows)} chunks, {why}"))
    for doc_id, row in sorted(documents.items()):
        if row["status"] != Status.INDEXED:
            continue
        rows = per_doc.get(doc_id, [])
        if not rows:
            problems.append(Problem(Check.NO_CHUNKS, doc_id, doc_id=doc_id))
            continue
        if len(rows) != row["n_chunks"]:
            detail = f"{len(rows)} stored, ledger says {row['n_chunks']}"
            problems.append(Problem(Check.CHUNK_COUNT, doc_id, detail, doc_id))
        numbers = sorted(index for index, _ in rows)
        counts = {count for _, count in rows}
        if numbers != list(range(len(numbers))) or counts != {len(numbers)}:
            detail = f"chunk_index {_ranges(numbers)}, chunk_count {sorted(counts)}"
            problems.append(Problem(Check.CHUNK_GAP, doc_id, detail, doc_id))
    return problems


def _ranges(numbers: list[int]) -> str:
    return f"{numbers[0]}..{numbers[-1]} ({len(numbers)} rows)" if numbers else "none"


def pipeline(documents: Mapping[str, Mapping[str, Any]], fp: Fingerprint) -> list[Problem]:
    """Documents made by another pipeline than the dataset's; a dataset of an older analyser."""
    problems = [
        Problem(Check.OLD_PIPELINE, doc_id, f"fingerprint {row['pipeline_fingerprint']}", doc_id)
        for doc_id, row in sorted(documents.items())
        if row["status"] == Status.INDEXED and row["pipeline_fingerprint"] != fp.id
    ]
    if fp.analyser != analysis.NAME:
        detail = f"{fp.analyser}, now {analysis.NAME}: re-index with --rebuild"
        problems.append(Problem(Check.OLD_ANALYSER, CHUNKS_TABLE, detail))
    return problems


def vectors(dataset: Dataset, fp: Fingerprint) -> list[Problem]:
    """The vector column's width, then every vector: finite and of unit length."""
    column_type = dataset.chunks.schema.field(VECTOR_COLUMN).type
    width = getattr(column_type, "list_size", None)
    if width != fp.dimension:
        detail = f"{width}, fingerprint {fp.dimension}"
        return [Problem(Check.VECTOR_WIDTH, VECTOR_COLUMN, detail)]
    problems = []
    for chunk_ids, matrix in _vector_batches(dataset, fp.dimension):
        finite = np.isfinite(matrix).all(axis=1)
        norms = np.linalg.norm(np.where(np.isfinite(matrix), matrix, 0.0), axis=1)
        for row in np.flatnonzero(~finite | (np.abs(norms - 1.0) > NORM_TOLERANCE)):
            chunk_id = chunk_ids[row]
            detail = "not finite" if not finite[row] else f"norm {norms[row]:.4g}"
            problems.append(Problem(Check.BAD_VECTOR, chunk_id, detail, doc_id_of(chunk_id)))
    return problems


def _vector_batches(dataset: Dataset, dimension: int) -> Iterator[tuple[list[str], np.ndarray]]:
    """(chunk ids, vectors) a few thousand rows at a time, so memory stays flat."""
    query = dataset.chunks.search().select(["chunk_id", VECTOR_COLUMN]).limit(None)
    for batch in query.to_batches(batch_size=4096):
        values = batch.column(VECTOR_COLUMN).flatten().to_numpy(zero_copy_only=False)
        yield batch.column("chunk_id").to_pylist(), values.reshape(batch.num_rows, dimension)


def indexes(dataset: Dataset) -> list[Problem]:
    """The indexes a dataset of its size should have, and the rows each does not cover."""
    problems = []
    rows = dataset.chunks.count_rows()
    wanted = {
        table: set(keys) | ({SEARCH_TEXT_COLUMN} if table == CHUNKS_TABLE and rows else set())
        for table, keys in KEY_INDEXES.items()
    }
    for name, columns in wanted.items():
        table = dataset.chunks if name == CHUNKS_TABLE else dataset.documents
        present = {column for index in table.list_indices() for column in index.columns}
        for column in sorted(columns - present):
            problems.append(Problem(Check.MISSING_INDEX, f"{name}.{column}"))
        for index in table.list_indices():
            stats = table.index_stats(index.name)
            unindexed = getattr(stats, "num_unindexed_rows", 0) if stats else 0
            if unindexed:
                detail = f"{unindexed} rows not covered"
                problems.append(Problem(Check.UNINDEXED_ROWS, f"{name}.{index.name}", detail))
    if rows >= ANN_MIN_ROWS and vector_index(dataset.chunks) is None:
        problems.append(Problem(Check.MISSING_INDEX, f"{CHUNKS_TABLE}.{VECTOR_COLUMN}"))
    return problems


@dataclass(frozen=True)
class RepairPlan:
    """What `repair` does before its ingest run."""

    drop_docs: tuple[str, ...]  # documents whose chunk rows go (unknown ones, damaged rows)
    reindex: tuple[str, ...]  # ledger rows to mark for re-indexing
    rebuild: bool  # the analyser or the vector width changed: only a full re-index helps
    indexes: bool  # an index is missing or incomplete: finalize even without changes

    @classmethod
    def of(cls, report: AuditReport) -> RepairPlan:
        drop: set[str] = set()
        reindex: set[str] = set()
        for problem in report.problems:
            if problem.check == Check.ORPHAN_CHUNKS:
                drop.add(problem.subject)
            if problem.check in _BY_REINDEX and problem.doc_id is not None:
                reindex.add(problem.doc_id)
                if problem.check in _DROP_ROWS_FIRST:
                    drop.add(problem.doc_id)
        rebuild = any(p.check in (Check.OLD_ANALYSER, Check.VECTOR_WIDTH) for p in report.problems)
        indexes = any(
            p.check in (Check.MISSING_INDEX, Check.UNINDEXED_ROWS) for p in report.problems
        )
        return cls(tuple(sorted(drop)), tuple(sorted(reindex)), rebuild, indexes)


def prepare_repair(dataset: Dataset, plan: RepairPlan) -> None:
    """Drop the rows `plan` names and mark its documents for re-indexing; the ingest run that
    follows does the rest (it re-indexes them, follows the folder, rebuilds the indexes)."""
    for start in range(0, len(plan.drop_docs), 500):
        dataset.chunks.delete(sql_in("doc_id", list(plan.drop_docs[start : start + 500])))
    for start in range(0, len(plan.reindex), 500):
        dataset.documents.update(
            where=sql_in("doc_id", list(plan.reindex[start : start + 500])),
            values={"pipeline_fingerprint": REPAIR_FINGERPRINT},
        )
