"""What a dataset holds, for `--stats` and `--sources`: no model is loaded."""

from __future__ import annotations

import dataclasses
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
from lancedb.table import Table

from tasks.core.scripts import language_group
from tasks.dataset.location import local_path
from tasks.dataset.schema import METADATA_COLUMNS
from tasks.search.searcher import Searcher

LANGUAGE_SAMPLE = 20_000  # most chunks whose text `languages` reads


def index_stats(searcher: Searcher) -> dict[str, Any]:
    """What the dataset holds and how it is indexed."""
    dataset = searcher.dataset
    chunks, documents = dataset.chunks, dataset.documents
    statuses = documents.search().select(["status"]).limit(None).to_arrow()["status"]
    by_status = {row["values"]: row["counts"] for row in pc.value_counts(statuses).to_pylist()}
    fingerprint = dataset.fingerprint
    n_chunks = chunks.count_rows()
    languages, sampled = language_shares(chunks, n_chunks)
    return {
        "index": dataset.uri,
        "chunks": n_chunks,
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
        "languages": languages,
        "languages_sampled_chunks": sampled,
    }


def language_shares(
    chunks: Table, n_chunks: int, sample: int = LANGUAGE_SAMPLE
) -> tuple[dict[str, float], int]:
    """({language group: its share of the chunks read, rounded to 3 places}, chunks read),
    the most common group first (the groups: tasks/core/scripts.py). The text column is
    scanned in batches; of more than `sample` chunks every k-th is read, k = ceil(n_chunks /
    sample): the same ones each time for a given table version."""
    step = -(-n_chunks // sample) or 1
    groups: Counter[str] = Counter()
    scanned = 0
    for batch in chunks.search().select(["text"]).limit(None).to_batches(4096):
        texts = batch.column("text").to_pylist()
        first = -scanned % step  # the batch's first row whose scan position is a multiple of step
        groups.update(language_group(text or "") for text in texts[first::step])
        scanned += len(texts)
    read = groups.total()
    ranked = sorted(groups.items(), key=lambda item: (-item[1], item[0]))
    return {group: round(n / read, 3) for group, n in ranked}, read


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
    """Every document in the ledger with its status, reason, chunk count and OCR'd pages, and
    its title and metadata (`meta` as an object; a ledger from before metadata has none)."""
    columns = [
        "doc_id", "mime_type", "status", "reason", "n_chunks", "ocr_pages", "mtime", "error",
        "title",
    ]  # fmt: skip
    documents = searcher.dataset.documents
    columns += [name for name in METADATA_COLUMNS if name in documents.schema.names]
    ledger = documents.search().select(columns).limit(None).to_arrow()
    rows = sorted(ledger.to_pylist(), key=lambda row: row["doc_id"])
    return [
        {
            **row,
            "mtime": row["mtime"].isoformat(),
            **({"meta": json.loads(row["meta"]) if row["meta"] else {}} if "meta" in row else {}),
        }
        for row in rows
    ]
