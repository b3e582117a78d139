"""The documents table: the ledger of what the last run did with each file, and its writes."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
from lancedb.table import Table

from tasks.core.reasons import Reason, Status
from tasks.core.records import Chunk, Document, LedgerEntry, Metadata, SourceFile
from tasks.dataset.schema import EPOCH, METADATA_COLUMNS, Fingerprint, document_rows
from tasks.dataset.sql import sql_in

LEDGER_COLUMNS = [
    "doc_id", "content_hash", "status", "reason", "pipeline_fingerprint", "size", "mtime",
    "etag", "attempts", "indexed_at",
]  # fmt: skip
_TIMES = ("mtime", "indexed_at")  # read as µs since the epoch


def read_ledger(table: Table) -> dict[str, LedgerEntry]:
    """doc_id → what the documents table records about it. Read column by column (a
    no-change run of 100,000 files reads 100,000 entries before anything else). A ledger
    from before a column of FILLED_LATER_COLUMNS reads it as null."""
    present = set(table.schema.names)
    rows = table.search().select([c for c in LEDGER_COLUMNS if c in present]).limit(None)
    ledger = rows.to_arrow()

    def column(name: str) -> list[Any]:
        if name not in present:
            return [None] * ledger.num_rows
        values = ledger.column(name)
        return (values.cast(pa.int64()) if name in _TIMES else values).to_pylist()

    statuses = {status.value: status for status in Status}  # a dict lookup, not Status(...)
    entries = {}
    for row in zip(*(column(name) for name in LEDGER_COLUMNS), strict=True):
        doc_id, content_hash, status, reason, fingerprint, size, mtime, etag, attempts, at = row
        entries[doc_id] = LedgerEntry(
            content_hash=content_hash,
            status=statuses[status],
            pipeline_fingerprint=fingerprint,
            size=size,
            mtime_us=mtime,
            reason=Reason.of(reason) if reason else None,
            etag=etag or "",
            attempts=attempts or 0,
            recorded_us=-1 if at is None else at,
        )
    return entries


def record(
    table: Table, documents: list[Document], chunks: list[Chunk], fp: Fingerprint, at: datetime
) -> None:
    """Record each document's outcome and chunk count in one commit, counting its attempts.

    A failed document keeps its previous chunks (Dataset.write_batch), so it keeps the title
    and metadata recorded with them too.
    """
    n_chunks: dict[str, int] = {}
    for chunk in chunks:
        n_chunks[chunk.doc_id] = n_chunks.get(chunk.doc_id, 0) + 1
    previous = {
        row["doc_id"]: row
        for row in table.search()
        .where(sql_in("doc_id", [doc.doc_id for doc in documents]))
        .select(["doc_id", "attempts", "title", *METADATA_COLUMNS])
        .to_arrow()
        .to_pylist()
    }
    attempts = {doc_id: row["attempts"] or 0 for doc_id, row in previous.items()}
    documents = [
        _as_before(doc, previous[doc.doc_id])
        if doc.status == Status.FAILED and doc.doc_id in previous
        else doc
        for doc in documents
    ]
    (
        table.merge_insert("doc_id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute(document_rows(documents, n_chunks, attempts, fp, at))
    )


def _as_before(doc: Document, row: dict[str, Any]) -> Document:
    """A failed document with the title and metadata its ledger row records."""
    return replace(doc, title=row["title"] or doc.title, metadata=metadata_of(row))


def metadata_of(row: dict[str, Any]) -> Metadata:
    """The metadata a ledger row records (empty where its columns are null)."""
    return Metadata(
        title=None,  # the ledger's title is the document's (declared or not)
        authors=tuple(row.get("authors") or ()),
        created=row.get("created"),
        modified=row.get("modified"),
        language=row.get("language"),
        meta=row.get("meta") or "",
    )


def forget(table: Table, doc_ids: list[str]) -> None:
    """Remove these documents from the ledger."""
    table.delete(sql_in("doc_id", doc_ids))


def refresh_stats(table: Table, sources: list[SourceFile]) -> None:
    """Record the size, mtime and ETag of files whose bytes did not change (touched, copied,
    an object written again with the same bytes, or listed with an ETag for the first time),
    in one commit, so the next scan takes the fast path for them again."""
    rows = pa.table(
        {
            "doc_id": [source.doc_id for source in sources],
            "size": pa.array([source.size for source in sources], pa.int64()),
            "mtime": pa.array(
                [EPOCH + timedelta(microseconds=source.mtime_us) for source in sources],
                pa.timestamp("us", tz="UTC"),
            ),
            "etag": pa.array([source.etag or None for source in sources], pa.string()),
        }
    )
    table.merge_insert("doc_id").when_matched_update_all().execute(rows)
