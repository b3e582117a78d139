"""A warm searcher's copy of the chunks: vector lists without a LanceDB query.

Every LanceDB query costs milliseconds before it reads anything (planning, the round trip to
its runtime: about 3 ms to fetch ten rows by key), and its vector search over 10,000 chunks
took 8–20 ms where one matrix product over the same vectors takes about 1.5 ms
(benchmarks/RESULTS.md, "Issue 24"). So a searcher that answers many questions (the service,
a batch of questions) keeps the table's vectors and the columns a hit shows in memory, ranks
the vectors exactly (cosine: stored vectors and questions are unit length, so a dot
product) and makes the hits from its copy.

The full-text list asks LanceDB for its rows' ids and scores alone and takes the rows from
the copy as well: fetching 50 rows' columns took more than the search (8.8 ms against 3.0 for
the ids, at 10,000 chunks). A row id the copy lacks (a row written after it was read) sends
that list back to LanceDB's rows.

The copy is of one table version; the searcher reads the table's version at each search and
reads the copy again when a writer has committed since. Searches with a filter keep using
LanceDB's prefiltered search, and so does a table whose vectors would take more than
KEPT_VECTORS_MAX_BYTES (there the vector index answers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from lancedb.table import AsyncTable

from tasks.dataset.chunk_store import every_row, vector_matrix
from tasks.dataset.schema import ROUTED_VECTOR_COLUMN, SEARCH_TEXT_COLUMN, VECTOR_COLUMN
from tasks.search.hits import Hit

# The most memory a searcher spends on the vectors (the hits' columns and the analysed text
# add about a third more: 3.6 KB of vector, 0.8 KB of columns and 0.4 KB of analysed text a
# chunk of data/sample): about 75,000 chunks of the default model's 897-d vectors. The
# product's time grows with the rows faster than the vector index's search: at 100,000
# chunks it took 29.8 ms against the index's 31.6, for 360 MiB (benchmarks/RESULTS.md,
# "Issue 24").
KEPT_VECTORS_MAX_BYTES = 256 * 2**20
# Rows whose hit fields (their columns as Python values) a copy keeps once a hit showed them:
# a list's 50 rows taken from the Arrow columns cost about 1.5 ms, made from kept fields a
# third of that. About 2 KB a row, so at most ~40 MB.
FIELDS_KEPT = 20_000


@dataclass(frozen=True)
class KeptChunks:
    """The chunks of one table version, or none where their vectors would be too large."""

    version: int
    columns: pa.Table  # the hits' columns, one row per chunk
    vectors: np.ndarray | None  # float32, row i is the vector of `columns` row i; None: none kept
    search_text: pa.ChunkedArray | None = None  # the analysed text, where the table has it
    row_ids: np.ndarray | None = None  # the rows' ids, sorted
    order: np.ndarray | None = None  # row_ids[k] is the id of `columns` row order[k]
    # the routed vectors (tasks/embed/cjk_backend.py), where the table has them: the rows
    # that have one, and those vectors in that order
    routed_rows: np.ndarray | None = None
    routed_vectors: np.ndarray | None = None
    # row → its hit's fields, for the rows hits were made of (up to FIELDS_KEPT)
    _fields: dict[int, dict[str, Any]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def kept(self) -> bool:
        return self.vectors is not None

    @classmethod
    async def read(cls, table: AsyncTable, version: int, columns: list[str]) -> KeptChunks:
        """`columns`, the analysed text and the vectors of `table` as of now (`version` or
        later), unless the vectors are too large: then none, marked with `version`."""
        rows = await table.count_rows()
        schema = await table.schema()
        vectors = [
            VECTOR_COLUMN,
            *([ROUTED_VECTOR_COLUMN] if ROUTED_VECTOR_COLUMN in schema.names else []),
        ]
        width = sum(schema.field(name).type.list_size for name in vectors)
        if rows * width * 4 > KEPT_VECTORS_MAX_BYTES:
            return cls(version, pa.table({}), None)
        analysed = [SEARCH_TEXT_COLUMN] if SEARCH_TEXT_COLUMN in schema.names else []
        read_version, data = await every_row(table, [*columns, *analysed, *vectors])
        ids = data.column("_rowid").to_numpy()
        order = np.argsort(ids, kind="stable")
        routed_rows, routed_vectors = None, None
        if ROUTED_VECTOR_COLUMN in vectors:
            present = data.column(ROUTED_VECTOR_COLUMN).is_valid().to_numpy(zero_copy_only=False)
            routed_rows = np.flatnonzero(present)
            routed_vectors = vector_matrix(data, ROUTED_VECTOR_COLUMN)[routed_rows]
        return cls(
            read_version,
            data.select(columns).combine_chunks(),
            vector_matrix(data),
            data.column(SEARCH_TEXT_COLUMN) if analysed else None,
            ids[order],
            order,
            routed_rows,
            routed_vectors,
        )

    def nearest(self, vector: np.ndarray, limit: int) -> list[Hit]:
        """Up to `limit` chunks nearest to `vector` by cosine similarity, best first."""
        return self.nearest_each(vector[np.newaxis], limit)[0]

    def nearest_each(self, vectors: np.ndarray, limit: int) -> list[list[Hit]]:
        """`nearest` for each row of `vectors`, in one product: a batch reads the kept
        vectors once per block of questions instead of once per question."""
        assert self.vectors is not None
        products = self.vectors @ vectors.astype(np.float32, copy=False).T
        found = []
        for scores in products.T:
            if limit < len(scores):
                top = np.argpartition(-scores, limit - 1)[:limit]
            else:
                top = np.arange(len(scores))
            top = top[np.argsort(-scores[top], kind="stable")]
            found.append(self.hits(top, scores[top]))
        return found

    def routed_nearest_each(self, vectors: np.ndarray, limit: int) -> list[list[Hit]]:
        """`nearest_each` over the routed vectors (the rows that have one), by cosine."""
        if self.routed_rows is None or self.routed_vectors is None or not len(self.routed_rows):
            return [[] for _ in range(len(vectors))]
        products = self.routed_vectors @ vectors.astype(np.float32, copy=False).T
        found = []
        for scores in products.T:
            top = np.argsort(-scores, kind="stable")[:limit]
            found.append(self.hits(self.routed_rows[top], scores[top]))
        return found

    def positions(self, row_ids: np.ndarray) -> np.ndarray | None:
        """The copy's rows with these ids, in order; None where the copy lacks one."""
        if self.row_ids is None or self.order is None:
            return None
        if not len(self.row_ids):
            return None if len(row_ids) else np.zeros(0, np.int64)
        at = np.minimum(np.searchsorted(self.row_ids, row_ids), len(self.row_ids) - 1)
        if not np.array_equal(self.row_ids[at], row_ids):
            return None
        return self.order[at]

    def hits(self, rows: np.ndarray, scores: np.ndarray) -> list[Hit]:
        """Hits of the copy's `rows`, with their scores."""
        fields = self._fields
        at = rows.tolist()
        missing = [row for row in dict.fromkeys(at) if row not in fields]
        if missing:  # read from the columns once, then kept (a list's rows recur)
            if len(fields) + len(missing) > FIELDS_KEPT:
                fields.clear()
                missing = list(dict.fromkeys(at))
            taken = self.columns.take(pa.array(missing, pa.int64())).to_pylist()
            fields.update(zip(missing, map(Hit.fields_of, taken), strict=True))
        return [
            Hit(**fields[row], score=round(float(score), 6))
            for row, score in zip(at, scores, strict=True)
        ]

    def vectors_of(self, rows: np.ndarray) -> list[np.ndarray]:
        """The vectors of the copy's `rows`."""
        assert self.vectors is not None
        return list(self.vectors[rows])

    def analysed(self, rows: np.ndarray) -> list[str]:
        """The analysed text of the copy's `rows` (the full-text column)."""
        assert self.search_text is not None
        return self.search_text.take(pa.array(rows, pa.int64())).to_pylist()
