"""Where a search's two lists come from, chosen once per search (`source_for`).

- `LanceSource`: LanceDB's rows, through the chunks table's async handle, with the search's
  prefilter (tasks/dataset/chunk_store.py holds the queries);
- `KeptSource`: a searcher's copy of the chunks (tasks/search/kept_chunks.py), for searches
  without a filter: vector lists from one matrix product, full-text lists from LanceDB's row
  ids and scores alone with the rows taken from the copy, and LanceDB's rows where the copy
  lacks one (a row written after the copy was read).

Both answer the same calls (`ChunkSource`); each list is a coroutine run on the process's
query loop (tasks/search/query_loop.py) or, for the copy's vector lists, a finished future.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from lancedb.table import AsyncTable

from tasks.dataset.chunk_store import Terms, matching_row_ids, matching_rows, nearest_rows
from tasks.dataset.schema import ROUTED_VECTOR_COLUMN, SEARCH_TEXT_COLUMN, VECTOR_COLUMN
from tasks.search import query_loop
from tasks.search.hits import Hit
from tasks.search.kept_chunks import KeptChunks


@dataclass(frozen=True)
class TextList:
    """Hybrid mode's full-text list: its hits, best first, and what the coverage gate and the
    cosine floor read of each hit (empty lists when not asked for)."""

    hits: list[Hit]
    terms: list[str]  # each hit's analysed text
    vectors: list[np.ndarray]  # each hit's stored vector

    def above(self, vector: np.ndarray, minimum: float) -> TextList:
        """The hits with at least `minimum` cosine similarity to `vector` (stored vectors are
        unit length: cosine is a dot product)."""
        kept = [i for i, row in enumerate(self.vectors) if float(np.dot(row, vector)) >= minimum]
        return TextList(
            [self.hits[i] for i in kept],
            [self.terms[i] for i in kept] if self.terms else [],
            [self.vectors[i] for i in kept],
        )


class ChunkSource(Protocol):
    """The lists one search reads, from wherever its chunks are."""

    def start_vector_lists(self, vectors: list[np.ndarray], limit: int) -> list[Future[list[Hit]]]:
        """The `limit` chunks nearest to each vector, by cosine similarity, best first."""
        ...

    def start_routed_lists(self, vectors: list[np.ndarray], limit: int) -> list[Future[list[Hit]]]:
        """The `limit` chunks whose routed vectors are nearest to each vector (chunks without
        one are none of them), by cosine similarity, best first."""
        ...

    async def text_hits(self, terms: Terms, limit: int) -> list[Hit]:
        """Up to `limit` chunks by BM25 of the weighted `terms`, best first."""
        ...

    async def text_list(self, terms: Terms, limit: int, analysed: bool, vectors: bool) -> TextList:
        """`text_hits` with each hit's analysed text (`analysed`) and stored vector (`vectors`)."""
        ...


@dataclass(frozen=True)
class LanceSource:
    """LanceDB's rows of the chunks table, with the search's prefilter."""

    table: AsyncTable  # the chunks table's async handle
    columns: list[str]  # the hit columns the table has
    where: str | None  # the search's prefilter

    def start_vector_lists(self, vectors: list[np.ndarray], limit: int) -> list[Future[list[Hit]]]:
        return [query_loop.submit(self.vector_hits(vector, limit)) for vector in vectors]

    async def vector_hits(
        self, vector: np.ndarray, limit: int, column: str = VECTOR_COLUMN
    ) -> list[Hit]:
        """Up to `limit` chunks nearest to `vector` by the vectors of `column`, by cosine
        similarity."""
        rows = await nearest_rows(self.table, vector, self.columns, self.where, limit, column)
        return [Hit.from_row(row, 1.0 - row["_distance"]) for row in rows]

    def start_routed_lists(self, vectors: list[np.ndarray], limit: int) -> list[Future[list[Hit]]]:
        routed = ROUTED_VECTOR_COLUMN
        return [query_loop.submit(self.vector_hits(v, limit, routed)) for v in vectors]

    async def text_hits(self, terms: Terms, limit: int) -> list[Hit]:
        rows = await matching_rows(self.table, terms, self.columns, self.where, limit)
        return [Hit.from_row(row, row["_score"]) for row in rows]

    async def text_list(self, terms: Terms, limit: int, analysed: bool, vectors: bool) -> TextList:
        columns = [
            *self.columns,
            *([SEARCH_TEXT_COLUMN] if analysed else []),
            *([VECTOR_COLUMN] if vectors else []),
        ]
        rows = await matching_rows(self.table, terms, columns, self.where, limit)
        return TextList(
            [Hit.from_row(row, row["_score"]) for row in rows],
            [row[SEARCH_TEXT_COLUMN] for row in rows] if analysed else [],
            [row[VECTOR_COLUMN] for row in rows] if vectors else [],
        )


@dataclass(frozen=True)
class KeptSource:
    """A searcher's copy of the chunks (with their vectors), LanceDB's rows where it lacks one."""

    kept: KeptChunks
    lance: LanceSource  # the same table, without a prefilter

    def start_vector_lists(self, vectors: list[np.ndarray], limit: int) -> list[Future[list[Hit]]]:
        return _finished(self.kept.nearest_each(np.stack(vectors), limit) if vectors else [])

    def start_routed_lists(self, vectors: list[np.ndarray], limit: int) -> list[Future[list[Hit]]]:
        found = self.kept.routed_nearest_each(np.stack(vectors), limit) if vectors else []
        return _finished(found)

    async def text_hits(self, terms: Terms, limit: int) -> list[Hit]:
        found = await self._text_rows(terms, limit)
        if found is None:
            return await self.lance.text_hits(terms, limit)
        return self.kept.hits(*found)

    async def text_list(self, terms: Terms, limit: int, analysed: bool, vectors: bool) -> TextList:
        found = await self._text_rows(terms, limit)
        if found is None:
            return await self.lance.text_list(terms, limit, analysed, vectors)
        rows, scores = found
        return TextList(
            self.kept.hits(rows, scores),
            self.kept.analysed(rows) if analysed else [],
            self.kept.vectors_of(rows) if vectors else [],
        )

    async def _text_rows(self, terms: Terms, limit: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The full-text list as (rows of the copy, BM25 scores), best first; None where the
        copy has no analysed text or lacks a row."""
        if self.kept.search_text is None:
            return None
        ids, scores = await matching_row_ids(self.lance.table, terms, limit)
        rows = self.kept.positions(ids)
        return None if rows is None else (rows, scores)


def _finished(lists: list[list[Hit]]) -> list[Future[list[Hit]]]:
    """Lists already made, as the finished futures a source's callers wait on."""
    done: list[Future[list[Hit]]] = []
    for hits in lists:
        done.append(Future())
        done[-1].set_result(hits)
    return done


def source_for(
    table: AsyncTable, columns: list[str], where: str | None, kept: KeptChunks | None
) -> ChunkSource:
    """The copy where the searcher keeps one (with vectors) and the search has no filter,
    else LanceDB's rows."""
    lance = LanceSource(table, columns, where)
    if where is None and kept is not None and kept.kept:
        return KeptSource(kept, lance)
    return lance
