"""The dataset's layout: its tables, their columns declared once, and the pipeline fingerprint.

`chunks` holds one row per chunk (keyed by chunk_id, with its vector); `documents` is the
per-file ledger (keyed by doc_id); `terms`, the vocabulary, is made from the chunks
(tasks/dataset/vocabulary.py). The fingerprint (model, dimension, token window, splitter
settings, schema version) is stored in the chunks table's schema metadata, so a dataset
always says how its rows were made.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa

from tasks.core.reasons import Status
from tasks.core.records import Chunk, Document, sha256_hex
from tasks.embed.base import ModelInfo
from tasks.text import analysis
from tasks.text.split import SplitSettings

CHUNKS_TABLE = "chunks"
DOCUMENTS_TABLE = "documents"
SCHEMA_VERSION = 3  # 3: the ledger's reason and ocr_pages, the chunks' search_text and ocr
FINGERPRINT_KEY = b"doc_indexer.fingerprint"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# The chunks table: every field of `Chunk`, then what the row takes from its document, then
# the analysed text the full-text index holds, then the document metadata that filters and
# hits read (copied from the ledger's, so that a filter is one SQL prefilter and a hit needs
# no second read). The vector column follows; its width comes from the fingerprint.
CHUNK_COLUMNS = (
    pa.field("chunk_id", pa.string(), nullable=False),
    pa.field("doc_id", pa.string(), nullable=False),
    pa.field("chunk_index", pa.int32()),
    pa.field("chunk_count", pa.int32()),
    pa.field("text", pa.string()),
    pa.field("char_start", pa.int64()),
    pa.field("char_end", pa.int64()),
    pa.field("section", pa.string()),
    pa.field("heading_level", pa.int32()),
    pa.field("page_number", pa.int32()),
    pa.field("ocr", pa.bool_()),  # the chunk's text was read by OCR from a page image
    # sha256 of what the model embedded: the text, or for a headings: model the heading path
    # and the text (tasks/ingest/reuse.py); vectors are reused by it
    pa.field("text_hash", pa.string()),
    pa.field("source_path", pa.string()),
    pa.field("mime_type", pa.string()),
    pa.field("title", pa.string()),
    pa.field("doc_hash", pa.string()),
    pa.field("indexed_at", pa.timestamp("us", tz="UTC")),
    pa.field("search_text", pa.string()),  # tasks.text.analysis.search_text(text)
    pa.field("authors", pa.list_(pa.string())),  # the document's (Metadata.authors); null: none
    pa.field("language", pa.string()),  # the document's (Metadata.language)
)
SEARCH_TEXT_COLUMN = "search_text"
LANGUAGE_COLUMN = "language"
VECTOR_COLUMN = "vector"
# The second vector of the chunks a model routes to a second model (ModelInfo.routed_dimension:
# Chinese, Japanese and Korean chunks by e5), null for the others; only in such datasets.
ROUTED_VECTOR_COLUMN = "cjk_vector"

# The documents ledger, one row per file seen.
DOCUMENT_COLUMNS = (
    pa.field("doc_id", pa.string(), nullable=False),
    pa.field("source_path", pa.string()),
    pa.field("content_hash", pa.string()),
    pa.field("size", pa.int64()),
    pa.field("mtime", pa.timestamp("us", tz="UTC")),
    pa.field("mime_type", pa.string()),
    pa.field("title", pa.string()),  # the declared title, else the first heading, else the name
    pa.field("n_chunks", pa.int32()),
    pa.field("ocr_pages", pa.list_(pa.int32())),  # pages whose text came from OCR
    pa.field("status", pa.string()),  # a Status
    pa.field("reason", pa.string()),  # a Reason, when empty or failed
    pa.field("error", pa.string()),  # the reason's detail
    pa.field("attempts", pa.int32()),  # consecutive failed attempts; 0 once indexed or empty
    pa.field("pipeline_fingerprint", pa.string()),  # Fingerprint.id
    pa.field("indexed_at", pa.timestamp("us", tz="UTC")),
    # What the document says about itself (tasks/core/records.py, Metadata); null when it
    # says nothing, and in ledgers from before these columns (METADATA_COLUMNS).
    pa.field("authors", pa.list_(pa.string())),
    pa.field("created", pa.string()),  # ISO 8601 where the stated date parses, else as stated
    pa.field("modified", pa.string()),
    pa.field("language", pa.string()),  # declared, else detected; a lower-case tag
    pa.field("meta", pa.string()),  # every key the document declares, as JSON text
    # An object's ETag when the run read it (SourceFile.etag), null for a file: an object
    # rewritten with the same size within the second of its last-modified time has another.
    pa.field("etag", pa.string()),
)
# The ledger's metadata columns.
METADATA_COLUMNS = ("authors", "created", "modified", "language", "meta")
# The columns that a dataset of this layout made before document metadata was read lacks
# (nullable: searches read them as empty). The next ingest run adds them, empty, and reads
# every document again to fill them (Dataset.prepare).
ADDED_COLUMNS = {CHUNKS_TABLE: ("authors", "language"), DOCUMENTS_TABLE: METADATA_COLUMNS}
# The columns that a dataset of this layout made before them lacks, added (empty) by the next
# ingest run without reading any document again: a missing ETag compares an object by its
# size and last-modified time, as before, and the next run of its store records it.
FILLED_LATER_COLUMNS = {DOCUMENTS_TABLE: ("etag",)}
# The pipeline fingerprint that marks a ledger row for reading again (its metadata unread).
METADATA_UNREAD = "metadata-unread"
DOCUMENTS_SCHEMA = pa.schema(DOCUMENT_COLUMNS)
# The vocabulary (tasks/dataset/vocabulary.py): each full-text term, and the chunks holding it.
TERMS_TABLE = "terms"
TERMS_SCHEMA = pa.schema(
    (pa.field("term", pa.string(), nullable=False), pa.field("chunks", pa.int64()))
)
_CHUNK_FIELDS = [field.name for field in dataclasses.fields(Chunk)]


@dataclass(frozen=True)
class Fingerprint:
    """What decides a dataset's rows; two runs may write one dataset only if theirs are equal."""

    model: str  # ModelInfo.model_id
    dimension: int
    max_tokens: int
    splitter: str  # the splitter settings, as JSON
    analyser: str = analysis.NAME  # what made search_text
    schema_version: int = SCHEMA_VERSION
    # the width of the routed column (ModelInfo.routed_dimension); 0: the table has none
    routed_dimension: int = 0

    @classmethod
    def of(cls, model: ModelInfo, splitter: SplitSettings) -> Fingerprint:
        return cls(
            model.model_id,
            model.dimension,
            model.max_tokens,
            splitter.recorded(),
            routed_dimension=model.routed_dimension,
        )

    @property
    def id(self) -> str:
        """Short stable id, stored on every ledger row."""
        return sha256_hex(self.to_json())[:16]

    @property
    def width(self) -> int:
        """The width of the vectors its model makes: both parts where it has a routed one."""
        return self.dimension + self.routed_dimension

    def to_json(self) -> str:
        """The recorded form; without a routed column, as before there was one (the same id)."""
        values = dataclasses.asdict(self)
        if not self.routed_dimension:
            del values["routed_dimension"]
        return json.dumps(values, sort_keys=True)

    @classmethod
    def from_json(cls, raw: str | bytes) -> Fingerprint:
        """The fingerprint a dataset recorded; keys this version does not know are dropped,
        and a dataset of an older version keeps its older schema_version."""
        values = json.loads(raw)
        known = {field.name for field in dataclasses.fields(cls)}
        values.setdefault("schema_version", 1)
        values.setdefault("analyser", "lancedb-default")  # before the analyser was recorded
        return cls(**{key: value for key, value in values.items() if key in known})

    def describe(self) -> str:
        return (
            f"model {self.model} ({self.dimension}-d), splitter {self.splitter}, "
            f"analyser {self.analyser}, dataset layout {self.schema_version}"
        )


def chunks_schema(fp: Fingerprint) -> pa.Schema:
    routed = (
        [pa.field(ROUTED_VECTOR_COLUMN, pa.list_(pa.float32(), fp.routed_dimension))]
        if fp.routed_dimension
        else []
    )
    return pa.schema(
        [*CHUNK_COLUMNS, pa.field(VECTOR_COLUMN, pa.list_(pa.float32(), fp.dimension)), *routed],
        metadata={FINGERPRINT_KEY: fp.to_json().encode()},
    )


def stored_fingerprint(schema: pa.Schema) -> Fingerprint | None:
    raw = (schema.metadata or {}).get(FINGERPRINT_KEY)
    return Fingerprint.from_json(raw) if raw else None


def now() -> datetime:
    return datetime.now(UTC)


def chunk_rows(
    documents: list[Document],
    chunks: list[Chunk],
    vectors: np.ndarray,
    fp: Fingerprint,
    at: datetime,
) -> pa.Table:
    """Arrow rows for the chunks table; `vectors[i]` belongs to `chunks[i]`."""
    by_id = {doc.doc_id: doc for doc in documents}
    columns: dict[str, list[Any]] = {field.name: [] for field in CHUNK_COLUMNS}
    for chunk in chunks:
        doc = by_id[chunk.doc_id]
        row = {name: getattr(chunk, name) for name in _CHUNK_FIELDS}
        row |= {
            "source_path": doc.source.path,
            "mime_type": doc.source.mime_type,
            "title": doc.title,
            "doc_hash": doc.source.content_hash,
            "indexed_at": at,
            SEARCH_TEXT_COLUMN: analysis.search_text(chunk.text),
            "authors": list(doc.metadata.authors) or None,
            "language": doc.metadata.language,
        }
        for name, value in row.items():
            columns[name].append(value)
    matrix = np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(chunks), fp.width)
    vector_columns = {VECTOR_COLUMN: _vector_column(matrix[:, : fp.dimension])}
    if fp.routed_dimension:  # empty where the model gave the chunk no routed vector
        routed = np.ascontiguousarray(matrix[:, fp.dimension :])
        empty = np.asarray(~routed.any(axis=1), bool)
        vector_columns[ROUTED_VECTOR_COLUMN] = _vector_column(routed, empty)
    return pa.table({**columns, **vector_columns}, schema=chunks_schema(fp))


def _vector_column(matrix: np.ndarray, empty: np.ndarray | None = None) -> pa.Array:
    """A float32 matrix as a fixed-size list column, rows in `empty` null."""
    flat = pa.array(np.ascontiguousarray(matrix, dtype=np.float32).reshape(-1))
    mask = None if empty is None else pa.array(empty)
    return pa.FixedSizeListArray.from_arrays(flat, matrix.shape[1], mask=mask)


def document_rows(
    documents: list[Document],
    n_chunks: dict[str, int],
    attempts: dict[str, int],
    fp: Fingerprint,
    at: datetime,
) -> pa.Table:
    """Arrow rows for the documents ledger; `attempts` holds the previous failure counts."""
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
            "ocr_pages": list(doc.ocr_pages),
            "status": str(doc.status),
            "reason": str(doc.reason) if doc.reason else None,
            "error": doc.message or None,
            "attempts": attempts.get(doc.doc_id, 0) + 1 if doc.status == Status.FAILED else 0,
            "pipeline_fingerprint": fp.id,
            "indexed_at": at,
            "authors": list(doc.metadata.authors) or None,
            "created": doc.metadata.created,
            "modified": doc.metadata.modified,
            "language": doc.metadata.language,
            "meta": doc.metadata.meta or None,
            "etag": doc.source.etag or None,
        }
        for doc in documents
    ]
    return pa.Table.from_pylist(rows, schema=DOCUMENTS_SCHEMA)
