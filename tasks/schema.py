"""The LanceDB dataset layout: table names, Arrow schemas, row builders and SQL literals.

Two tables: `chunks` (one row per chunk, keyed by chunk_id, with its vector) and `documents`
(the per-file ledger, keyed by doc_id). The pipeline fingerprint (model, dimension, splitter
settings, schema version) is stored in the chunks table's schema metadata, so a dataset
always says how its vectors were made.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa

from tasks.records import FAILED, Chunk, Document, sha256_hex

CHUNKS_TABLE = "chunks"
DOCUMENTS_TABLE = "documents"
SCHEMA_VERSION = 2
FINGERPRINT_KEY = b"doc_indexer.fingerprint"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def fingerprint(model_id: str, dimension: int, max_tokens: int, split_settings: object) -> dict:
    """What decides the vectors in a dataset; two runs may share a table only if equal."""
    return {
        "schema_version": SCHEMA_VERSION,
        "model": model_id,
        "dimension": dimension,
        "max_tokens": max_tokens,
        "splitter": repr(split_settings),
    }


def fingerprint_id(fp: dict) -> str:
    """Short stable id of a fingerprint, stored on every ledger row."""
    return sha256_hex(json.dumps(fp, sort_keys=True))[:16]


def chunks_schema(fp: dict) -> pa.Schema:
    return pa.schema(
        [
            pa.field("chunk_id", pa.string(), nullable=False),
            pa.field("doc_id", pa.string(), nullable=False),
            pa.field("source_path", pa.string()),
            pa.field("mime_type", pa.string()),
            pa.field("title", pa.string()),
            pa.field("section", pa.string()),
            pa.field("heading_level", pa.int32()),
            pa.field("page_number", pa.int32()),
            pa.field("chunk_index", pa.int32()),
            pa.field("chunk_count", pa.int32()),
            pa.field("char_start", pa.int64()),
            pa.field("char_end", pa.int64()),
            pa.field("text", pa.string()),
            pa.field("text_hash", pa.string()),
            pa.field("vector", pa.list_(pa.float32(), fp["dimension"])),
            pa.field("doc_hash", pa.string()),
            pa.field("indexed_at", pa.timestamp("us", tz="UTC")),
        ],
        metadata={FINGERPRINT_KEY: json.dumps(fp, sort_keys=True).encode()},
    )


DOCUMENTS_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("source_path", pa.string()),
        pa.field("content_hash", pa.string()),
        pa.field("size", pa.int64()),
        pa.field("mtime", pa.timestamp("us", tz="UTC")),
        pa.field("mime_type", pa.string()),
        pa.field("title", pa.string()),
        pa.field("n_chunks", pa.int32()),
        pa.field("status", pa.string()),
        pa.field("error", pa.string()),
        pa.field("attempts", pa.int32()),  # consecutive failed attempts; 0 once indexed or empty
        pa.field("pipeline_fingerprint", pa.string()),
        pa.field("indexed_at", pa.timestamp("us", tz="UTC")),
    ]
)


def stored_fingerprint(schema: pa.Schema) -> dict | None:
    raw = (schema.metadata or {}).get(FINGERPRINT_KEY)
    return json.loads(raw) if raw else None


def now() -> datetime:
    return datetime.now(UTC)


def chunk_rows(
    documents: list[Document], chunks: list[Chunk], vectors: np.ndarray, fp: dict, at: datetime
) -> pa.Table:
    """Arrow rows for the chunks table; `vectors[i]` belongs to `chunks[i]`."""
    by_id = {doc.doc_id: doc for doc in documents}
    columns: dict[str, list] = {name: [] for name in chunks_schema(fp).names if name != "vector"}
    for chunk in chunks:
        doc = by_id[chunk.doc_id]
        row = {
            "chunk_id": chunk.chunk_id,
            "doc_id": chunk.doc_id,
            "source_path": doc.source.path,
            "mime_type": doc.source.mime_type,
            "title": doc.title,
            "section": chunk.section,
            "heading_level": chunk.heading_level,
            "page_number": chunk.page_number,
            "chunk_index": chunk.chunk_index,
            "chunk_count": chunk.chunk_count,
            "char_start": chunk.char_start,
            "char_end": chunk.char_end,
            "text": chunk.text,
            "text_hash": chunk.text_hash,
            "doc_hash": doc.source.content_hash,
            "indexed_at": at,
        }
        for name, value in row.items():
            columns[name].append(value)
    dimension = fp["dimension"]
    flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1))
    columns["vector"] = pa.FixedSizeListArray.from_arrays(flat, dimension)
    return pa.table(columns, schema=chunks_schema(fp))


def document_rows(
    documents: list[Document],
    n_chunks: dict[str, int],
    attempts: dict[str, int],
    fp: dict,
    at: datetime,
) -> pa.Table:
    """Arrow rows for the documents ledger; `attempts` holds the previous failure counts."""
    fp_id = fingerprint_id(fp)
    rows = [
        {
            "doc_id": doc.doc_id,
            "source_path": doc.source.path,
            "content_hash": doc.source.content_hash,
            "size": doc.source.size,
            "mtime": EPOCH + timedelta(microseconds=doc.source.mtime_us),
            "mime_type": doc.source.mime_type,
            "title": doc.title,
            "n_chunks": n_chunks.get(doc.doc_id, 0),
            "status": doc.status,
            "error": doc.error,
            "attempts": attempts.get(doc.doc_id, 0) + 1 if doc.status == FAILED else 0,
            "pipeline_fingerprint": fp_id,
            "indexed_at": at,
        }
        for doc in documents
    ]
    return pa.Table.from_pylist(rows, schema=DOCUMENTS_SCHEMA)


def sql_string(value: str) -> str:
    """A SQL string literal for a LanceDB filter: quoted, with quotes doubled."""
    return "'" + value.replace("'", "''") + "'"


def sql_in(column: str, values: list[str]) -> str:
    """`column IN ('a', 'b')` with every value quoted by `sql_string`."""
    return f"{column} IN ({', '.join(sql_string(v) for v in values)})"


def escape_like(text: str) -> str:
    """`text` as a LIKE pattern (backslash escape) that matches it literally."""
    return "".join("\\" + ch if ch in "%_\\" else ch for ch in text)


def glob_to_like(pattern: str) -> str:
    """A LIKE pattern (backslash escape) that matches what the fnmatch-style glob matches.

    `*` matches any run of characters (slashes included), `?` exactly one; LIKE's own
    wildcards and the escape character in the glob are matched literally.
    """
    wildcards = {"*": "%", "?": "_"}
    return "".join(wildcards.get(ch) or escape_like(ch) for ch in pattern)
