"""A warm searcher's copy of the chunks: vector lists without a LanceDB query.

Every LanceDB query costs milliseconds before it reads anything (planning, the round trip to
its runtime: about 3 ms to fetch ten rows by key), and its vector search over 10,000 chunks
took 8–20 ms where one matrix product over the same vectors takes about 1.5 ms
(benchmarks/RESULTS.md, "Issue 24"). So a searcher that answers many questions (the service,
a batch of questions) keeps the table's vectors and the columns a hit shows in memory, ranks
the vectors exactly (cosine: stored vectors and questions are unit length, so a dot
product) and makes the hits from its copy.

The copy is of one table version; the searcher reads the table's version at each search and
reads the copy again when a writer has committed since. Searches with a filter keep using
LanceDB's prefiltered search, and so does a table whose vectors would take more than
KEPT_VECTORS_MAX_BYTES (there the vector index answers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from lancedb.table import AsyncTable

from tasks.dataset.chunk_store import every_row, vector_matrix
from tasks.dataset.schema import VECTOR_COLUMN
from tasks.search.hits import Hit

# The most memory a searcher spends on the vectors (the hits' columns add their text, about
# a tenth more): about 75,000 chunks of the default model's 897-d vectors. The product's time
# grows with the rows faster than the vector index's search: at 100,000 chunks it took 29.8
# ms against the index's 31.6, for 360 MiB (benchmarks/RESULTS.md, "Issue 24").
KEPT_VECTORS_MAX_BYTES = 256 * 2**20


@dataclass(frozen=True)
class KeptChunks:
    """The chunks of one table version, or none where their vectors would be too large."""

    version: int
    columns: pa.Table  # the hits' columns, one row per chunk
    vectors: np.ndarray | None  # float32, row i is the vector of `columns` row i; None: none kept

    @property
    def kept(self) -> bool:
        return self.vectors is not None

    @classmethod
    async def read(cls, table: AsyncTable, version: int, columns: list[str]) -> KeptChunks:
        """`columns` and the vectors of `table` as of now (`version` or later), unless the
        vectors are too large: then none, marked with `version`."""
        rows = await table.count_rows()
        dimension = (await table.schema()).field(VECTOR_COLUMN).type.list_size
        if rows * dimension * 4 > KEPT_VECTORS_MAX_BYTES:
            return cls(version, pa.table({}), None)
        read_version, data = await every_row(table, [*columns, VECTOR_COLUMN])
        hit_columns = data.drop_columns([VECTOR_COLUMN]).combine_chunks()
        return cls(read_version, hit_columns, vector_matrix(data))

    def nearest(self, vector: np.ndarray, limit: int) -> list[Hit]:
        """Up to `limit` chunks nearest to `vector` by cosine similarity, best first."""
        assert self.vectors is not None
        scores = self.vectors @ vector.astype(np.float32, copy=False)
        if limit < len(scores):
            top = np.argpartition(-scores, limit - 1)[:limit]
        else:
            top = np.arange(len(scores))
        top = top[np.argsort(-scores[top], kind="stable")]
        rows = self.columns.take(pa.array(top)).to_pylist()
        return [Hit.from_row(row, float(scores[i])) for row, i in zip(rows, top, strict=True)]
