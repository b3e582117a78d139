"""The chunks table: chunk sets replaced in one commit, stored vectors, deletes, the two searches.

`nearest` (by vector) and `matching` (by full-text relevance) are the two searches; they return
plain rows with the columns asked for and the score LanceDB gives. `nearest_rows` and
`matching_rows` are the same searches on LanceDB's async API, which the searcher runs on its
own event loop: both lists of a question in one round trip, without the sync API's per-query
calls to LanceDB's background loop (three of them `Table.schema`). `async_table` gives the
open table's async handle, so both APIs read one table: its version, read consistency and
index caches.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from lancedb.query import (
    AsyncFTSQuery,
    AsyncVectorQuery,
    BooleanQuery,
    FullTextQuery,
    MatchQuery,
    Occur,
)
from lancedb.table import AsyncTable, Table

from tasks.core import lance_imports
from tasks.core.reasons import Status
from tasks.core.records import Chunk, Document
from tasks.dataset.ann import tune
from tasks.dataset.schema import (
    ROUTED_VECTOR_COLUMN,
    SEARCH_TEXT_COLUMN,
    VECTOR_COLUMN,
    Fingerprint,
    chunk_rows,
)
from tasks.dataset.sql import sql_in
from tasks.dataset.upkeep import indexed_columns
from tasks.text import analysis

# A full-text query: index terms (tasks/text/analysis.py), each with its weight in the BM25
# sum (1 for a question's own words; a translation's share, tasks/search/question.py).
Terms = Mapping[str, float]


def replace_chunks(
    table: Table,
    documents: list[Document],
    chunks: list[Chunk],
    vectors: np.ndarray,
    fp: Fingerprint,
    at: datetime,
    append: bool = False,
) -> None:
    """Give every document that did not fail exactly the chunks given, in one commit.

    One merge inserts and updates the new chunks and deletes the documents' other chunks. A
    failed document is left out, so it keeps its previous chunks. `append`: the documents
    have no chunks in the table yet, so the chunks are only added.
    """
    replaced = [doc.doc_id for doc in documents if doc.status != Status.FAILED]
    if not np.isfinite(vectors).all():  # LanceDB is told to keep nulls below: none slips in
        raise ValueError("a vector to write has a value that is not a finite number")
    # The routed column is null for the chunks the model does not route; LanceDB's merge
    # refuses a null vector unless told to keep it.
    nulls: Literal["null", "error"] = "null" if fp.routed_dimension else "error"
    if append:
        if chunks:
            table.add(chunk_rows(documents, chunks, vectors, fp, at), on_bad_vectors=nulls)
    elif replaced:
        (
            table.merge_insert("chunk_id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .when_not_matched_by_source_delete(sql_in("doc_id", replaced))
            .execute(chunk_rows(documents, chunks, vectors, fp, at), on_bad_vectors=nulls)
        )


def stored_vectors(table: Table, text_hashes: list[str]) -> dict[str, np.ndarray]:
    """Vectors already stored for these chunk text hashes (same model: the fingerprint), as
    the model gives them: with the routed part after the first, zeros where it is empty."""
    wanted = sorted(set(text_hashes))
    if not wanted:
        return {}
    routed = ROUTED_VECTOR_COLUMN in table.schema.names
    found = (
        table.search()
        .where(sql_in("text_hash", wanted))
        .select(["text_hash", VECTOR_COLUMN, *([ROUTED_VECTOR_COLUMN] if routed else [])])
        .limit(None)
        .to_arrow()
    )
    vectors = vector_matrix(found)
    if routed:
        vectors = np.hstack([vectors, vector_matrix(found, ROUTED_VECTOR_COLUMN)])
    return dict(zip(found.column("text_hash").to_pylist(), vectors, strict=True))


def vector_matrix(rows: pa.Table, column_name: str = VECTOR_COLUMN) -> np.ndarray:
    """A vector column of `rows` as one float32 matrix, a row per row (a null row: zeros)."""
    column = rows.column(column_name).combine_chunks()
    size = column.type.list_size
    if column.null_count:
        column = column.fill_null(pa.scalar([0.0] * size, column.type))
    flat = column.flatten().to_numpy(zero_copy_only=False)
    return np.ascontiguousarray(flat.reshape(len(rows), size), np.float32)


def delete_chunks(table: Table, doc_ids: list[str]) -> int:
    """Remove these documents' chunks; returns the number of chunks deleted."""
    before = table.count_rows()
    table.delete(sql_in("doc_id", doc_ids))
    return before - table.count_rows()


def async_table(table: Table) -> AsyncTable:
    """The async handle of an open table: the same table, not a second one (LanceDB's sync
    table runs every call through it; `lance_imports.async_handle` finds it)."""
    return lance_imports.async_handle(table)


def nearest(
    table: Table,
    vector: np.ndarray,
    columns: list[str],
    where: str | None,
    limit: int,
    column: str = VECTOR_COLUMN,
) -> list[dict[str, Any]]:
    """Up to `limit` rows nearest to `vector` by cosine distance (`_distance`) of the vectors
    of `column` (the main ones, or the routed ones, of which empty rows are none).

    Exact below the ANN threshold, the tuned IVF index above it. A selective prefilter
    can leave the probed index lists short of `limit` rows; then the same query runs as
    an exact scan of the filtered rows instead.
    """
    query: Any = table.search(vector, vector_column_name=column)
    query = tune(query.distance_type("cosine").select([*columns, "_distance"]).limit(limit))
    if where is not None:
        query = query.where(where, prefilter=True)
    rows = query.to_list()
    if where is not None and len(rows) < limit and column in indexed_columns(table):
        rows = query.bypass_vector_index().to_list()
    return rows


def matching(
    table: Table, query: str | Terms, columns: list[str], where: str | None, limit: int
) -> list[dict[str, Any]]:
    """Up to `limit` rows by BM25 relevance (`_score`) in the full-text index to `query`:
    weighted terms, or a question's text, analysed as the chunks were, any of its terms (no
    query syntax)."""
    match = _match(question_terms(query) if isinstance(query, str) else query)
    if match is None:
        return []
    search = table.search(match, query_type="fts").select([*columns, "_score"]).limit(limit)
    if where is not None:
        search = search.where(where, prefilter=True)
    return search.to_list()


async def nearest_rows(
    table: AsyncTable,
    vector: np.ndarray,
    columns: list[str],
    where: str | None,
    limit: int,
    column: str = VECTOR_COLUMN,
) -> list[dict[str, Any]]:
    """`nearest` on the async handle: the same query, the same rows; by the vectors of
    `column` (the routed column's empty rows are none of the nearest)."""
    query = _nearest_query(table, vector, columns, where, limit, column)
    rows = await query.to_list()
    if where is not None and len(rows) < limit:
        indexes = await table.list_indices()  # only a short filtered list pays this
        if any(column in index.columns for index in indexes):
            rows = (
                await _nearest_query(table, vector, columns, where, limit, column)
                .bypass_vector_index()
                .to_list()
            )
    return rows


async def matching_rows(
    table: AsyncTable, terms: Terms, columns: list[str], where: str | None, limit: int
) -> list[dict[str, Any]]:
    """`matching` on the async handle, for weighted `terms`: the same query, the same rows
    (for a question's own terms, `question_terms`)."""
    match = _match(terms)
    if match is None:
        return []
    query: AsyncFTSQuery = table.query().nearest_to_text(match)
    query = query.select([*columns, "_score"]).limit(limit)
    if where is not None:
        query = query.where(where)  # a prefilter: the async API's default
    return await query.to_list()


async def matching_row_ids(
    table: AsyncTable, terms: Terms, limit: int
) -> tuple[np.ndarray, np.ndarray]:
    """`matching_rows` with no filter and no columns: (the rows' ids, their BM25 scores),
    best first. Fetching the columns of 50 rows costs more than the search itself; a caller
    holding the rows' columns (tasks/search/kept_chunks.py) takes them from its copy."""
    match = _match(terms)
    if match is None:
        return np.zeros(0, np.uint64), np.zeros(0, np.float32)
    query: AsyncFTSQuery = table.query().nearest_to_text(match)
    found = await query.select(["_score"]).with_row_id().limit(limit).to_arrow()
    return (
        found.column("_rowid").to_numpy(),
        found.column("_score").to_numpy().astype(np.float32, copy=False),
    )


async def every_row(table: AsyncTable, columns: list[str]) -> tuple[int, pa.Table]:
    """(the table's version, `columns` of every row and their row ids, `_rowid`), all of one
    version: read again where a writer committed during the read. A row id is the row's
    address (fragment and offset), never given to other content: a fragment's rows do not
    change, and compaction writes new fragments."""
    while True:
        version = await table.version()
        rows = await table.query().select(columns).with_row_id().to_arrow()
        if await table.version() == version:
            return version, rows


def _nearest_query(
    table: AsyncTable,
    vector: np.ndarray,
    columns: list[str],
    where: str | None,
    limit: int,
    column: str = VECTOR_COLUMN,
) -> AsyncVectorQuery:
    query = table.query().nearest_to(vector).column(column).distance_type("cosine")
    query = tune(query).select([*columns, "_distance"]).limit(limit)
    return query if where is None else query.where(where)  # a prefilter, as in `nearest`


def question_terms(text: str) -> dict[str, float]:
    """A question's own terms as a full-text query: analysed as the chunks were, each once,
    each weighing one."""
    return dict.fromkeys(analysis.query_text(text).split(), 1.0)


def _match(terms: Terms) -> FullTextQuery | None:
    """Any of the terms, exact (no query syntax), each weighing its weight; None for none.
    Terms that all weigh one are one MatchQuery (its defaults; its pydantic fields hide them
    from mypy); others a boolean query of one boosted clause per term, whose score is the
    weighted sum of the terms' BM25 parts."""
    if not terms:
        return None
    if all(weight == 1.0 for weight in terms.values()):
        return MatchQuery(" ".join(terms), SEARCH_TEXT_COLUMN)  # type: ignore[call-arg]
    clauses: list[tuple[Occur, FullTextQuery]] = [
        (Occur.SHOULD, MatchQuery(term, SEARCH_TEXT_COLUMN, boost=weight))  # type: ignore[call-arg]
        for term, weight in terms.items()
    ]
    return BooleanQuery(clauses)
