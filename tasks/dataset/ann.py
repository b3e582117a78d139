"""Approximate nearest-neighbour index on the chunk vectors, built only where it pays.

Below ANN_MIN_ROWS an exact (brute-force) scan is fast enough and always right. Above it, an
IVF_SQ index (inverted lists of 8-bit scalar-quantised vectors, cosine) is built; queries probe
NPROBES lists and re-rank REFINE_FACTOR × k candidates with exact distances, so scores stay
exact cosine similarities and recall@10 stays at or above 0.95 (see benchmarks/query.py for
the measurements behind these numbers). IVF_SQ trains in seconds, so it is retrained whenever
the table has doubled since the last training (the index name records that row count, so the
number of lists keeps up with the table); in between, `optimize()` after each ingest run adds
new rows to the existing lists.
"""

from __future__ import annotations

from typing import Any

from lancedb.index import IvfSq
from lancedb.table import Table

from tasks.dataset.schema import VECTOR_COLUMN

INDEX_PREFIX = "vector_ivfsq_"  # + the number of rows it was trained on
ANN_MIN_ROWS = 5_000
NPROBES = 20
REFINE_FACTOR = 5
# Lance's defaults otherwise: a list per ~10,000 rows (4 lists at 40,000 rows, measured), trained
# on 256 rows a list; the build's memory is the pass over every vector, not the training
# sample (benchmarks/finalize_memory.py; RESULTS.md, "Scale", "Memory").
VECTOR_INDEX = IvfSq(distance_type="cosine")


def vector_index(table: Table) -> Any:
    """The table's index on the vector column, or None."""
    return next((i for i in table.list_indices() if VECTOR_COLUMN in i.columns), None)


def refresh_vector_index(table: Table, min_rows: int | None = None) -> bool:
    """Build the vector index once the table reaches `min_rows` (ANN_MIN_ROWS), retrain it
    when it has doubled.

    Returns whether an index was (re)built.
    """
    rows = table.count_rows()
    if rows < (ANN_MIN_ROWS if min_rows is None else min_rows):
        return False
    current = vector_index(table)
    if current is not None and _trained_rows(current.name) * 2 > rows:
        return False
    table.create_index(VECTOR_COLUMN, config=VECTOR_INDEX, name=f"{INDEX_PREFIX}{rows}")
    if current is not None:  # dropped after the new one exists, so readers always have one
        table.drop_index(current.name)
    return True


def _trained_rows(index_name: str) -> int:
    """Rows the index was trained on, from its name; 0 for an index we did not name."""
    count = index_name.removeprefix(INDEX_PREFIX)
    return int(count) if index_name.startswith(INDEX_PREFIX) and count.isdigit() else 0


def tune(query: Any) -> Any:
    """Search settings for the vector index; without an index LanceDB ignores them."""
    return query.nprobes(NPROBES).refine_factor(REFINE_FACTOR)
