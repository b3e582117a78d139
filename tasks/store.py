"""Read and write the LanceDB dataset: ledger, atomic batch writes, run tags and upkeep."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import lancedb
import numpy as np
from filelock import FileLock, Timeout
from prefect import task

from tasks import faults
from tasks.ann import refresh_vector_index
from tasks.discover import LedgerEntry
from tasks.records import EMPTY, INDEXED, Chunk, Document
from tasks.schema import (
    CHUNKS_TABLE,
    DOCUMENTS_SCHEMA,
    DOCUMENTS_TABLE,
    EPOCH,
    chunk_rows,
    chunks_schema,
    document_rows,
    now,
    sql_in,
    stored_fingerprint,
)
from tasks.storage import DatasetError, connect, lock_file

DEFAULT_INDEX_URI = str(Path(__file__).resolve().parents[1] / "data" / "index")

# Scalar indexes created with the tables, before any merge keyed on them.
KEY_INDEXES = {CHUNKS_TABLE: ("chunk_id", "doc_id", "text_hash"), DOCUMENTS_TABLE: ("doc_id",)}
RUN_TAG_PREFIX = "run-"
KEEP_RUN_TAGS = 10  # versions older than the oldest kept run tag are cleaned up
MIN_VERSION_AGE = timedelta(minutes=1)  # never clean up versions a reader may just have opened


def _tables(db: lancedb.DBConnection) -> set[str]:
    return set(db.table_names())


def prepare_dataset(uri: str, fp: dict, rebuild: bool = False) -> None:
    """Create the tables if needed; refuse a dataset whose fingerprint differs.

    With `rebuild`, existing tables are dropped first and everything is indexed again.
    """
    db = connect(uri)
    if rebuild:
        for name in _tables(db) & {CHUNKS_TABLE, DOCUMENTS_TABLE}:
            db.drop_table(name)
    existing = _tables(db)
    if CHUNKS_TABLE in existing:
        stored = stored_fingerprint(db.open_table(CHUNKS_TABLE).schema)
        if stored != fp:
            raise DatasetError(
                f"dataset {uri} was built with {_describe(stored)}, this run uses {_describe(fp)}; "
                "vectors would not be comparable. Re-run with --rebuild to re-index everything "
                "with the new settings, or pass --index to write a new dataset."
            )
    else:
        db.create_table(CHUNKS_TABLE, schema=chunks_schema(fp))
    if DOCUMENTS_TABLE not in existing:
        db.create_table(DOCUMENTS_TABLE, schema=DOCUMENTS_SCHEMA)
    for name, keys in KEY_INDEXES.items():
        table = db.open_table(name)
        indexed = {column for index in table.list_indices() for column in index.columns}
        for key in keys:
            if key not in indexed:
                table.create_scalar_index(key, index_type="BTREE")


def _describe(fp: dict | None) -> str:
    if fp is None:
        return "no recorded fingerprint"
    return f"model {fp['model']} ({fp['dimension']}-d), splitter {fp['splitter']}"


def dataset_exists(uri: str) -> bool:
    """Whether `uri` holds a chunks table; a store that cannot be reached is a DatasetError."""
    return CHUNKS_TABLE in _tables(connect(uri))


def read_fingerprint(uri: str) -> dict:
    """The fingerprint of an existing dataset; DatasetError if there is none."""
    db = connect(uri)
    if CHUNKS_TABLE not in _tables(db):
        raise DatasetError(
            f"no index at {uri}: run `python -m flows.ingest DIR --index {uri}` first"
        )
    fp = stored_fingerprint(db.open_table(CHUNKS_TABLE).schema)
    if fp is None:
        raise DatasetError(f"{uri} has a chunks table that doc-indexer did not create")
    return fp


def read_ledger(uri: str) -> dict[str, LedgerEntry]:
    """doc_id → what the documents table records about it."""
    columns = ["doc_id", "content_hash", "status", "pipeline_fingerprint", "size", "mtime"]
    rows = connect(uri).open_table(DOCUMENTS_TABLE).to_arrow().select(columns).to_pylist()
    return {
        row["doc_id"]: LedgerEntry(
            content_hash=row["content_hash"],
            status=row["status"],
            pipeline_fingerprint=row["pipeline_fingerprint"],
            size=row["size"],
            mtime_us=(row["mtime"] - EPOCH) // timedelta(microseconds=1),
        )
        for row in rows
    }


def stored_vectors(uri: str, text_hashes: list[str]) -> dict[str, np.ndarray]:
    """Vectors already in the chunks table for these text hashes (same model by fingerprint)."""
    wanted = sorted(set(text_hashes))
    if not wanted:
        return {}
    table = connect(uri).open_table(CHUNKS_TABLE)
    found = (
        table.search()
        .where(sql_in("text_hash", wanted))
        .select(["text_hash", "vector"])
        .limit(None)
        .to_arrow()
    )
    vectors = found.column("vector").combine_chunks().flatten().to_numpy()
    vectors = vectors.reshape(found.num_rows, -1) if found.num_rows else vectors
    return dict(zip(found.column("text_hash").to_pylist(), vectors, strict=True))


def write_documents(
    uri: str, documents: list[Document], chunks: list[Chunk], vectors: np.ndarray, fp: dict
) -> None:
    """Replace the chunk sets of a batch of documents in one commit, then update the ledger.

    Indexed and empty documents get exactly the chunks given (old chunks of those documents
    are deleted in the same merge). A failed document keeps its previous chunks, so a bad
    re-index never removes the last good version. The ledger is written after the chunks, so
    it never claims chunks that are not in the table.
    """
    faults.maybe_fail("write")
    db = connect(uri)
    at = now()
    chunks_table = db.open_table(CHUNKS_TABLE)
    replaced = [doc.doc_id for doc in documents if doc.status in (INDEXED, EMPTY)]
    if replaced:
        (
            chunks_table.merge_insert("chunk_id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .when_not_matched_by_source_delete(sql_in("doc_id", replaced))
            .execute(chunk_rows(documents, chunks, vectors, fp, at))
        )
    faults.maybe_crash("write")  # between the chunks commit and the ledger commit
    n_chunks: dict[str, int] = {}
    for chunk in chunks:
        n_chunks[chunk.doc_id] = n_chunks.get(chunk.doc_id, 0) + 1
    if documents:
        ledger = db.open_table(DOCUMENTS_TABLE)
        previous = (
            ledger.search()
            .where(sql_in("doc_id", [doc.doc_id for doc in documents]))
            .select(["doc_id", "attempts"])
            .to_arrow()
            .to_pylist()
        )
        attempts = {row["doc_id"]: row["attempts"] or 0 for row in previous}
        (
            ledger.merge_insert("doc_id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute(document_rows(documents, n_chunks, attempts, fp, at))
        )


def delete_documents(uri: str, doc_ids: list[str]) -> int:
    """Remove documents and their chunks; returns the number of chunks deleted."""
    if not doc_ids:
        return 0
    db = connect(uri)
    chunks_table = db.open_table(CHUNKS_TABLE)
    condition = sql_in("doc_id", list(doc_ids))
    before = chunks_table.count_rows()
    chunks_table.delete(condition)
    db.open_table(DOCUMENTS_TABLE).delete(condition)
    return before - chunks_table.count_rows()


def finalize_dataset(uri: str, run_tag: str) -> int:
    """Full-text index, compaction, old-version cleanup, and a tag on the version produced.

    Cleanup keeps every version a kept run tag points at (the newest KEEP_RUN_TAGS runs) and
    everything younger than MIN_VERSION_AGE, so versions and data files stay bounded while the
    last runs can still be restored. Returns the chunks table version a reader now sees.
    """
    db = connect(uri)
    chunks_table = db.open_table(CHUNKS_TABLE)
    if chunks_table.count_rows() > 0 and not any(
        "text" in index.columns for index in chunks_table.list_indices()
    ):
        chunks_table.create_fts_index("text", use_tantivy=False)
    refresh_vector_index(chunks_table)  # an ANN index once the table is big enough
    for name in (CHUNKS_TABLE, DOCUMENTS_TABLE):
        table = db.open_table(name)
        run_tags = sorted(t for t in table.tags.list() if t.startswith(RUN_TAG_PREFIX))
        for old in run_tags[: max(0, len(run_tags) - (KEEP_RUN_TAGS - 1))]:
            table.tags.delete(old)
        # Compact and update indexes first, sparing everything near the oldest tag; the second
        # pass has nothing to compact, so its cutoff, computed just before, lands right
        # before the oldest tagged version.
        table.optimize(cleanup_older_than=_cleanup_age(table, margin=timedelta(hours=1)))
        table.optimize(cleanup_older_than=_cleanup_age(table, margin=timedelta(seconds=0.5)))
        table.tags.create(run_tag, table.version)
    return db.open_table(CHUNKS_TABLE).version


def _cleanup_age(table, margin: timedelta) -> timedelta:
    """Age beyond which versions can go without touching a tagged one (or a very new one)."""
    tagged = {info["version"] for info in table.tags.list().values()}
    stamps = [v["timestamp"] for v in table.list_versions() if v["version"] in tagged]
    if not stamps:
        return MIN_VERSION_AGE
    # Version timestamps are naive; take the later reading of "now" so the margin only grows.
    reference = max(datetime.now(), datetime.now(UTC).replace(tzinfo=None))
    return max(MIN_VERSION_AGE, reference - min(stamps) + margin)


def run_tags(uri: str) -> dict[str, int]:
    """Run tag → chunks table version, oldest first."""
    read_fingerprint(uri)
    tags = connect(uri).open_table(CHUNKS_TABLE).tags.list()
    return {name: tags[name]["version"] for name in sorted(tags)}


def restore_dataset(uri: str, tag: str) -> int:
    """Make the tagged versions of both tables the current ones (a new commit each).

    Returns the new chunks table version.
    """
    read_fingerprint(uri)
    db = connect(uri)
    for name in (CHUNKS_TABLE, DOCUMENTS_TABLE):
        table = db.open_table(name)
        if tag not in table.tags.list():
            known = ", ".join(sorted(table.tags.list())) or "none"
            raise DatasetError(f"no tag {tag!r} in {uri} (run tags: {known})")
        table.checkout(tag)
        table.restore()
    return db.open_table(CHUNKS_TABLE).version


@contextmanager
def dataset_lock(uri: str, timeout: float, logger: logging.Logger) -> Iterator[None]:
    """Hold the dataset's ingest lock: a second run waits for the first, visibly.

    See `tasks.storage.lock_file` for where the lock lives; for an object-store dataset it
    only keeps apart runs on this machine (the deployment's concurrency limit does the rest).
    """
    path = lock_file(uri)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        logger.warning("another ingest run holds %s; waiting up to %.0f s", lock.lock_file, timeout)
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


write_task = task(write_documents, name="write", retries=3, retry_delay_seconds=[1, 5, 15])
delete_task = task(delete_documents, name="delete", retries=3, retry_delay_seconds=[1, 5, 15])
finalize_task = task(finalize_dataset, name="finalize", retries=2, retry_delay_seconds=[2, 10])
