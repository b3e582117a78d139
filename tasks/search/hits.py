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

    Every field but `score`, `found_by` (set in hybrid mode only, tasks/search/fusion.py)
    and the context ones is a column of the chunks table (checked by
    tests/test_contracts.py); `--json` and POST /search return these fields. `char_start`
    and `char_end` are the text's range in the document text. With the `context` or
    `expand` search option, `context` is the text around the hit (tasks/search/context.py)
    and `context[context_start:context_end] == text`; else the three are None.
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
    char_start: int
    char_end: int
    found_by: FoundBy | None = None
    # The document's metadata (tasks/core/records.py, Metadata); a dataset made before it was
    # read has no such columns: none and empty.
    authors: list[str] = field(default_factory=list)  # a list: as JSON gives it back
    language: str | None = None
    context: str | None = None
    context_start: int | None = None
    context_end: int | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any], score: float) -> Hit:
        return cls(**cls.fields_of(row), score=round(score, 6))

    @staticmethod
    def fields_of(row: dict[str, Any]) -> dict[str, Any]:
        """The fields a row gives a hit (all but the score): Hit(**fields, score=...)."""
        values: dict[str, Any] = {name: row.get(name) for name in HIT_COLUMNS}
        values["authors"] = list(values["authors"] or ())
        return values

    def rescored(self, score: float) -> Hit:
        """The same hit (found_by included) with another score."""
        return dataclasses.replace(self, score=round(score, 6))


# The fields of Hit that are not columns of the chunks table.
NOT_COLUMNS = ("score", "found_by", "context", "context_start", "context_end")
# The chunks table columns a search reads: the other fields of Hit.
HIT_COLUMNS = [field.name for field in dataclasses.fields(Hit) if field.name not in NOT_COLUMNS]
