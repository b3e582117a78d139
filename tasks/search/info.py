"""What a dataset holds, for `--stats` and `--sources`: no model is loaded."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from tasks.dataset.location import local_path
from tasks.search.searcher import Searcher


def index_stats(searcher: Searcher) -> dict[str, Any]:
    """What the dataset holds and how it is indexed."""
    dataset = searcher.dataset
    chunks, documents = dataset.chunks, dataset.documents
    statuses = documents.search().select(["status"]).limit(None).to_arrow()["status"]
    by_status = {row["values"]: row["counts"] for row in pc.value_counts(statuses).to_pylist()}
    fingerprint = dataset.fingerprint
    return {
        "index": dataset.uri,
        "chunks": chunks.count_rows(),
        "documents": documents.count_rows(),
        "documents_by_status": dict(sorted(by_status.items())),
        "model": fingerprint.model,
        "fingerprint": dataclasses.asdict(fingerprint),
        "table_version": chunks.version,
        "run_tags": dataset.run_tags(),
        "indexes": [
            {
                "name": index.name,
                "type": index.index_type,
                "columns": list(index.columns),
                "indexed_rows": index.num_indexed_rows,
                "unindexed_rows": index.num_unindexed_rows,
            }
            for index in chunks.list_indices()
        ],
        "default_mode": searcher.resolve_mode(None),
        "size_bytes": _size(dataset.uri, [chunks, documents]),
    }


def _size(uri: str, tables: list[Any]) -> int:
    """Bytes under a local dataset (old versions and indexes included); for an object store,
    which is not listed from here, the bytes of the tables' live data."""
    folder = local_path(uri)
    if folder is not None:
        return sum(
            (Path(parent) / name).stat().st_size
            for parent, _, names in os.walk(folder)
            for name in names
        )
    return sum(table.stats()["total_bytes"] for table in tables)


def list_sources(searcher: Searcher) -> list[dict[str, Any]]:
    """Every document in the ledger with its status, reason, chunk count and OCR'd pages."""
    columns = [
        "doc_id", "mime_type", "status", "reason", "n_chunks", "ocr_pages", "mtime", "error"
    ]  # fmt: skip
    ledger = searcher.dataset.documents.search().select(columns).limit(None).to_arrow()
    rows = sorted(ledger.to_pylist(), key=lambda row: row["doc_id"])
    return [{**row, "mtime": row["mtime"].isoformat()} for row in rows]
