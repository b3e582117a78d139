"""A search result: a chunk's columns that a reader needs, and its score."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

# Which of hybrid mode's two lists found a hit: the vector one, the full-text one or both.
FoundBy = Literal["vector", "text", "both"]


@dataclass(frozen=True)
class Hit:
    """One search result; what `score` means depends on the mode (tasks/search/searcher.py).

    Every field but `score` and `found_by` (set in hybrid mode only, tasks/search/fusion.py)
    is a column of the chunks table (checked by tests/test_contracts.py); `--json` and POST
    /search return these fields.
    """

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
    found_by: FoundBy | None = None
    # The document's metadata (tasks/core/records.py, Metadata); a dataset made before it was
    # read has no such columns: none and empty.
    authors: list[str] = field(default_factory=list)  # a list: as JSON gives it back
    language: str | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any], score: float) -> Hit:
        values: dict[str, Any] = {name: row.get(name) for name in HIT_COLUMNS}
        values["authors"] = list(values["authors"] or ())
        return cls(**values, score=round(score, 6))

    def rescored(self, score: float) -> Hit:
        """The same hit (found_by included) with another score."""
        return dataclasses.replace(self, score=round(score, 6))


# The chunks table columns a search reads: the fields of Hit but score and found_by.
HIT_COLUMNS = [
    field.name for field in dataclasses.fields(Hit) if field.name not in ("score", "found_by")
]
