"""The text around a hit: its neighbouring chunks (`context`) or its whole section (`expand`).

The chunks around every hit of a search (of a whole batch of questions too) come in one query
on the chunks table: per document, its chunk_index ranges (context) or its sections within
`limit` characters of the hits (expand). A section is the run of chunks with the hit's
`section` that are contiguous with it; a neighbouring chunk may belong to another section.

Chunks are spans of the document text (`char_start`, `char_end`; tasks/text/split.py) and
neighbours overlap by up to the splitter's chunk_overlap characters, so the offsets say what
to write once. Between chunks that do not touch lies only whitespace the splitter trimmed
(the blank line between blocks, for one); it is not stored, and is written as a blank line
where it was two characters or more, else as one space.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from lancedb.table import Table

from tasks.dataset.sql import sql_string
from tasks.search.hits import Hit
from tasks.search.params import SECTION_LIMIT, Expand

CONTEXT_COLUMNS = ["doc_id", "chunk_index", "section", "text", "char_start", "char_end"]
_MAX_SHIFT = 40  # characters a cut may move to reach a word boundary (longer: cut anyway)


@dataclass(frozen=True)
class Piece:
    """A chunk's text and its place in the document."""

    chunk_index: int
    section: str
    text: str
    char_start: int
    char_end: int

    @classmethod
    def of_row(cls, row: dict[str, Any]) -> Piece:
        """The piece of a row with CONTEXT_COLUMNS."""
        return cls(*(row[name] for name in CONTEXT_COLUMNS[1:]))

    @classmethod
    def of_hit(cls, hit: Hit) -> Piece:
        return cls(hit.chunk_index, hit.section, hit.text, hit.char_start, hit.char_end)


def with_context(
    chunks: Table,
    results: list[list[Hit]],
    context: int = 0,
    expand: Expand | None = None,
    limit: int = SECTION_LIMIT,
) -> list[list[Hit]]:
    """The hits of each question with the text around them: `context` neighbouring chunks
    of the same document on each side, or with `expand="section"` the hit's section cut to
    `limit` characters centred on the hit. One query for all hits; none when neither is
    asked for."""
    hits = [hit for found in results for hit in found]
    if not hits or not (context or expand):
        return results
    where = (
        section_condition(hits, limit)
        if expand == "section"
        else neighbour_condition(hits, context)
    )
    rows = chunks.search().where(where).select(CONTEXT_COLUMNS).limit(None).to_list()
    by_doc: dict[str, dict[int, Piece]] = defaultdict(dict)
    for row in rows:
        by_doc[row["doc_id"]][row["chunk_index"]] = Piece.of_row(row)
    return [
        [around_hit(hit, by_doc[hit.doc_id], context, expand is not None, limit) for hit in found]
        for found in results
    ]


def neighbour_condition(hits: Iterable[Hit], context: int) -> str:
    """SQL filter for the chunks within `context` places of each hit in its document, the
    ranges of one document merged."""
    ranges: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for hit in hits:
        ranges[hit.doc_id].append((max(0, hit.chunk_index - context), hit.chunk_index + context))
    conditions = []
    for doc_id, spans in ranges.items():
        merged: list[tuple[int, int]] = []
        for low, high in sorted(spans):
            if merged and low <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], high))
            else:
                merged.append((low, high))
        indexes = " OR ".join(
            f"(chunk_index >= {low} AND chunk_index <= {high})" for low, high in merged
        )
        conditions.append(f"(doc_id = {sql_string(doc_id)} AND ({indexes}))")
    return " OR ".join(conditions)


def section_condition(hits: Iterable[Hit], limit: int) -> str:
    """SQL filter for the chunks of each hit's section that lie within `limit` characters of
    it (more can never show), so a long section costs no more than its shown part."""
    conditions = {
        f"(doc_id = {sql_string(hit.doc_id)} AND section = {sql_string(hit.section)} "
        f"AND char_end >= {hit.char_start - limit} AND char_start <= {hit.char_end + limit})"
        for hit in hits
    }
    return " OR ".join(sorted(conditions))


def around_hit(hit: Hit, pieces: dict[int, Piece], context: int, section: bool, limit: int) -> Hit:
    """The hit with its context from its document's fetched `pieces` (by chunk_index). When
    they no longer hold the hit's own chunk as the search saw it (the document was
    re-indexed in between), the context is the hit's text alone."""
    own = Piece.of_hit(hit)
    if pieces.get(hit.chunk_index) != own:
        return dataclasses.replace(
            hit, context=hit.text, context_start=0, context_end=len(hit.text)
        )
    first = last = hit.chunk_index
    if section:
        while (before := pieces.get(first - 1)) is not None and before.section == own.section:
            first -= 1
        while (after := pieces.get(last + 1)) is not None and after.section == own.section:
            last += 1
    else:
        first, last = max(0, first - context), last + context
    run = [pieces[i] for i in range(first, last + 1) if i in pieces]
    text, starts = join_pieces(run)
    start = starts[run.index(own)]
    end = start + len(hit.text)
    if section:
        text, start, end = centred(text, start, end, limit)
    return dataclasses.replace(hit, context=text, context_start=start, context_end=end)


def join_pieces(pieces: list[Piece]) -> tuple[str, list[int]]:
    """The pieces' texts (in document order) as one text, each overlap written once, and
    where each piece starts in it (see the module doc for the whitespace between them)."""
    parts: list[str] = []
    starts: list[int] = []
    length = 0
    end = 0  # where in the document the joined text ends so far
    for piece in pieces:
        if not parts:
            new, starts_at = piece.text, 0
        elif piece.char_start < end:  # overlaps what is written: write only the rest
            new, starts_at = piece.text[end - piece.char_start :], length - (end - piece.char_start)
        else:
            gap = "\n\n" if piece.char_start - end >= 2 else " " * (piece.char_start - end)
            new, starts_at = gap + piece.text, length + len(gap)
        parts.append(new)
        starts.append(starts_at)
        length += len(new)
        end = max(end, piece.char_end)
    return "".join(parts), starts


def centred(text: str, start: int, end: int, limit: int) -> tuple[str, int, int]:
    """`text` cut to at most `limit` characters (never less than text[start:end]) centred on
    text[start:end] where the text allows, at word boundaries; the new start and end."""
    if len(text) <= limit:
        return text, start, end
    width = max(limit, end - start)
    begin = min(max(0, start - (width - (end - start)) // 2), len(text) - width)
    finish = begin + width
    if begin > 0 and not text[begin - 1].isspace():  # inside a word: from the next one
        ahead = range(begin, min(start, begin + _MAX_SHIFT))
        begin = next((i for i in ahead if text[i].isspace()), begin)
    if finish < len(text) and not text[finish].isspace():  # inside a word: to the previous one
        back = range(finish - 1, max(end, finish - _MAX_SHIFT) - 1, -1)
        finish = next((i for i in back if text[i].isspace()), finish)
    while begin < start and text[begin].isspace():
        begin += 1
    while finish > end and text[finish - 1].isspace():
        finish -= 1
    return text[begin:finish], start - begin, end - begin
