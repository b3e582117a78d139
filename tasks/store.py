"""Read and write the LanceDB dataset: ledger, atomic per-batch writes, upkeep and search."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import lancedb
import numpy as np
from prefect import task

from tasks.discover import LedgerEntry
from tasks.records import EMPTY, INDEXED, Chunk, Document
from tasks.schema import (
    CHUNKS_TABLE,
    DOCUMENTS_SCHEMA,
    DOCUMENTS_TABLE,
    chunk_rows,
    chunks_schema,
    document_rows,
    now,
    sql_in,
    stored_fingerprint,
)

DEFAULT_INDEX_URI = str(Path(__file__).resolve().parents[1] / "data" / "index")


class DatasetError(Exception):
    """The dataset is missing or cannot be used as asked; the message says what to do."""


def connect(uri: str) -> lancedb.DBConnection:
    return lancedb.connect(uri)


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


def _describe(fp: dict | None) -> str:
    if fp is None:
        return "no recorded fingerprint"
    return f"model {fp['model']} ({fp['dimension']}-d), splitter {fp['splitter']}"


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
    table = connect(uri).open_table(DOCUMENTS_TABLE)
    rows = table.to_arrow().select(["doc_id", "content_hash", "status", "pipeline_fingerprint"])
    return {
        row["doc_id"]: LedgerEntry(row["content_hash"], row["status"], row["pipeline_fingerprint"])
        for row in rows.to_pylist()
    }


@dataclass(frozen=True)
class WriteResult:
    chunks_written: int
    documents_written: int
    version: int  # chunks table version after the write


def write_documents(
    uri: str, documents: list[Document], chunks: list[Chunk], vectors: np.ndarray, fp: dict
) -> WriteResult:
    """Replace the chunk sets of a batch of documents in one commit, then update the ledger.

    Indexed and empty documents get exactly the chunks given (old chunks of those documents
    are deleted in the same merge). A failed document keeps its previous chunks, so a bad
    re-index never removes the last good version. The ledger is written after the chunks, so
    it never claims chunks that are not in the table.
    """
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
    n_chunks: dict[str, int] = {}
    for chunk in chunks:
        n_chunks[chunk.doc_id] = n_chunks.get(chunk.doc_id, 0) + 1
    if documents:
        (
            db.open_table(DOCUMENTS_TABLE)
            .merge_insert("doc_id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute(document_rows(documents, n_chunks, fp, at))
        )
    return WriteResult(len(chunks), len(documents), chunks_table.version)


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


def finalize_dataset(uri: str) -> int:
    """Key indexes, a current full-text index, compaction and old-version cleanup.

    Returns the chunks table version a reader sees after the run.
    """
    db = connect(uri)
    chunks_table = db.open_table(CHUNKS_TABLE)
    documents_table = db.open_table(DOCUMENTS_TABLE)
    for table, key in (
        (chunks_table, "chunk_id"),
        (chunks_table, "doc_id"),
        (documents_table, "doc_id"),
    ):
        if not any(key in index.columns for index in table.list_indices()):
            table.create_scalar_index(key, index_type="BTREE")
    if chunks_table.count_rows() > 0:
        chunks_table.create_fts_index("text", use_tantivy=False, replace=True)
    for table in (chunks_table, documents_table):
        table.optimize(cleanup_older_than=timedelta(minutes=10))
    return chunks_table.version


write_task = task(write_documents, name="write", retries=3, retry_delay_seconds=[1, 5, 15])
delete_task = task(delete_documents, name="delete", retries=3, retry_delay_seconds=[1, 5, 15])
finalize_task = task(finalize_dataset, name="finalize", retries=2, retry_delay_seconds=[2, 10])
