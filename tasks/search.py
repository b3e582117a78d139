"""Search the chunks table: embed the question with the dataset's own model, nearest chunks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from prefect import task

from tasks.embed import get_embedder, model_spec_for
from tasks.schema import CHUNKS_TABLE, glob_to_like, sql_string
from tasks.store import connect, read_fingerprint


@dataclass(frozen=True)
class Hit:
    """One search result; `score` is cosine similarity (higher is better)."""

    chunk_id: str
    doc_id: str
    source_path: str
    title: str
    section: str
    page_number: int | None
    chunk_index: int
    chunk_count: int
    score: float
    text: str


def source_filter(source_glob: str) -> str:
    """SQL filter matching a glob against the relative doc_id or the absolute source path."""
    like = sql_string(glob_to_like(source_glob))
    return f"(doc_id LIKE {like} OR source_path LIKE {like})"


def search_vector(
    uri: str, vector: np.ndarray, k: int = 5, source_glob: str | None = None
) -> list[Hit]:
    """The k chunks nearest to `vector` by cosine distance, optionally filtered by path glob."""
    table = connect(uri).open_table(CHUNKS_TABLE)
    query = table.search(np.asarray(vector, dtype=np.float32), vector_column_name="vector")
    query = query.distance_type("cosine").limit(k)
    if source_glob is not None:
        query = query.where(source_filter(source_glob), prefilter=True)
    return [
        Hit(
            chunk_id=row["chunk_id"],
            doc_id=row["doc_id"],
            source_path=row["source_path"],
            title=row["title"],
            section=row["section"],
            page_number=row["page_number"],
            chunk_index=row["chunk_index"],
            chunk_count=row["chunk_count"],
            score=round(1.0 - float(row["_distance"]), 6),
            text=row["text"],
        )
        for row in query.to_list()
    ]


def search_text(uri: str, text: str, k: int = 5, source_glob: str | None = None) -> list[Hit]:
    """Embed `text` with the model that built the dataset, then search by vector."""
    embedder = get_embedder(model_spec_for(read_fingerprint(uri)["model"]))
    return search_vector(uri, embedder.encode([text])[0], k, source_glob)


search_task = task(search_text, name="search", retries=1)
