# Over 300 lines: the recursive splitter and its token-window refit are one algorithm.
"""Split documents into chunks: recursive character splitting, section-aware, token-safe.

Sizes are counted in Unicode characters. A piece of text longer than `chunk_size` is cut at
the first separator (in priority order) that occurs in it, each part is cut further with the
remaining separators if it is still too long, and the small parts are then merged greedily
back into chunks of at most `chunk_size` characters that overlap by up to `chunk_overlap`.
The empty separator falls back to grapheme clusters, so a character (or a base letter with
its combining marks, or an emoji sequence) is never cut.

Chunks never straddle a section (heading path), a page, or the line between OCR text and a
text layer, and carry that metadata.
Chunks are spans of the document text: `text == document_text[char_start:char_end]`.
A chunk that is longer than the embedding model's token window is split again, smaller,
until it fits, so the model never silently truncates it.

`splitter="semantic"` chooses the semantic splitter instead (tasks/text/semantic_split.py):
it shares the sections, the token-window fitting and the chunk records defined here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Literal

import regex
from pydantic import model_validator

from tasks.core.options import Settings, internal, option
from tasks.core.reasons import Status
from tasks.core.records import (
    BLOCK_SEPARATOR,
    Block,
    Chunk,
    Document,
    chunk_id,
    document_text,
)

DEFAULT_SEPARATORS: tuple[str, ...] = ("\n\n", "\n", "。", "？", "！", ".", " ", "")

Span = tuple[int, int]
Place = tuple[str, int, int | None, bool]  # section (heading path), heading level, page, OCR
TokenCounter = Callable[[list[str]], list[int]]

_GRAPHEME = regex.compile(r"\X")


class SplitSettings(Settings):
    """Splitter settings; part of the pipeline fingerprint and of the split cache key."""

    chunk_size: int = option(1000, "most characters per chunk", ge=1)
    chunk_overlap: int = option(
        100, "most characters of overlap between chunks (recursive splitter)", ge=0
    )
    separators: tuple[str, ...] = internal(DEFAULT_SEPARATORS)  # part of the splitter
    splitter: Literal["recursive", "semantic"] = option(
        "recursive",
        "recursive: cut at paragraphs, lines, sentences, words; semantic: cut between "
        "sentences where the embeddings of the text before and after diverge",
    )
    breakpoint_percentile: float = option(
        95.0,
        "semantic splitter: cut between two sentences where the embedding distance of the "
        "text before and after exceeds this percentile of the document's distances",
        metavar="P",
        ge=0,
        le=100,
    )

    @model_validator(mode="after")
    def _overlap_below_size(self) -> SplitSettings:
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError(
                f"chunk_overlap ({self.chunk_overlap}) must be smaller than chunk_size "
                f"({self.chunk_size})"
            )
        return self

    def recorded(self) -> str:
        """The settings as the dataset fingerprint records them (JSON). The semantic
        splitter's fields appear only when it is chosen, so the recursive splitter's record,
        and with it every dataset built before the option existed, stays as it was."""
        if self.splitter == "recursive":
            return self.model_dump_json(exclude={"splitter", "breakpoint_percentile"})
        return self.model_dump_json()


def _cut_at(text: str, start: int, end: int, sep: str) -> list[Span]:
    """Cut text[start:end] after each `sep`; the separator stays with the part on its left."""
    if sep == "":
        return [m.span() for m in _GRAPHEME.finditer(text, start, end)]
    spans, pos = [], start
    while True:
        hit = text.find(sep, pos, end)
        if hit < 0:
            break
        spans.append((pos, hit + len(sep)))
        pos = hit + len(sep)
    if pos < end:
        spans.append((pos, end))
    return spans


def _pieces(text: str, start: int, end: int, size: int, separators: Sequence[str]) -> list[Span]:
    """Cut text[start:end] into contiguous pieces of at most `size` characters where possible."""
    if end - start <= size:
        return [(start, end)]
    for i, sep in enumerate(separators):
        if sep == "" or text.find(sep, start, end) >= 0:
            pieces: list[Span] = []
            for a, b in _cut_at(text, start, end, sep):
                if b - a <= size:
                    pieces.append((a, b))
                else:
                    pieces.extend(_pieces(text, a, b, size, separators[i + 1 :]))
            return pieces
    return [(start, end)]  # no separator applies: an over-long piece is kept whole


def _content_end(text: str, span: Span) -> int:
    """End of a span without its trailing whitespace."""
    a, b = span
    while b > a and text[b - 1].isspace():
        b -= 1
    return b


def _merge(text: str, pieces: list[Span], size: int, overlap: int) -> list[Span]:
    """Merge contiguous pieces greedily into spans of at most `size`, overlapping <= `overlap`."""
    spans: list[Span] = []
    window: list[Span] = []
    for piece in pieces:
        length = piece[1] - piece[0]
        # Trailing whitespace (a separator) would be trimmed from the chunk, so it does not count.
        if window and _content_end(text, piece) - window[0][0] > size:
            spans.append((window[0][0], window[-1][1]))
            # Keep trailing pieces as overlap while they fit the overlap and leave room.
            while window and (
                window[-1][1] - window[0][0] > overlap
                or window[-1][1] - window[0][0] + length > size
            ):
                window.pop(0)
        window.append(piece)
    if window:
        spans.append((window[0][0], window[-1][1]))
    return spans


def strip_span(text: str, span: Span) -> Span | None:
    """Shrink a span to exclude surrounding whitespace; None when nothing is left."""
    a, b = span[0], _content_end(text, span)
    while a < b and text[a].isspace():
        a += 1
    return (a, b) if a < b else None


def split_spans(
    text: str, settings: SplitSettings, start: int = 0, end: int | None = None
) -> list[Span]:
    """Chunk spans of text[start:end], whitespace-trimmed, in document order."""
    end = len(text) if end is None else end
    pieces = _pieces(text, start, end, settings.chunk_size, settings.separators)
    merged = _merge(text, pieces, settings.chunk_size, settings.chunk_overlap)
    spans: list[Span] = []
    for span in merged:
        stripped = strip_span(text, span)
        if stripped and (not spans or stripped[1] > spans[-1][1]):  # drop spans inside the last
            spans.append(stripped)
    return spans


def fit_token_window(
    text: str,
    spans: list[Span],
    settings: SplitSettings,
    count_tokens: TokenCounter,
    max_tokens: int,
) -> tuple[list[Span], int, int]:
    """Split again, smaller, every span whose token count exceeds `max_tokens`.

    Returns the new spans, how many spans had to be split again, and how many still exceed
    the window (a span that cannot be cut further, e.g. one huge unbreakable token).
    """
    counts = count_tokens([text[a:b] for a, b in spans]) if spans else []
    fitted: list[Span] = []
    refit = over = 0
    for (a, b), tokens in zip(spans, counts, strict=True):
        if tokens <= max_tokens:
            fitted.append((a, b))
            continue
        # Shrink the character budget in proportion to the overflow, with some margin.
        size = max(1, min(b - a - 1, int((b - a) * max_tokens / tokens * 0.9)))
        smaller = SplitSettings(
            chunk_size=size,
            chunk_overlap=min(settings.chunk_overlap, size // 4),
            separators=settings.separators,
        )
        pieces = split_spans(text, smaller, a, b)
        if b - a <= 1 or pieces == [(a, b)]:
            fitted.append((a, b))
            over += 1
            continue
        refit += 1
        sub, sub_refit, sub_over = fit_token_window(text, pieces, smaller, count_tokens, max_tokens)
        fitted.extend(sub)
        refit += sub_refit
        over += sub_over
    return fitted, refit, over


def _place(block: Block) -> Place:
    return (block.section, block.heading_level, block.page_number, block.ocr)


def segments(document: Document) -> list[tuple[int, int, Place]]:
    """Spans of the document text whose blocks share one section, page and origin (OCR)."""
    found, pos = [], 0
    for place, group in groupby(document.blocks, key=_place):
        blocks = list(group)
        length = len(BLOCK_SEPARATOR.join(block.text for block in blocks))
        found.append((pos, pos + length, place))
        pos += length + len(BLOCK_SEPARATOR)
    return found


@dataclass(frozen=True)
class SplitResult:
    chunks: tuple[Chunk, ...]
    refit: int = 0  # chunks that were split again to fit the model's token window
    over_window: int = 0  # chunks the model would still truncate (counted with its tokenizer)


def split_document(
    document: Document,
    settings: SplitSettings,
    count_tokens: TokenCounter | None = None,
    max_tokens: int | None = None,
) -> SplitResult:
    """Chunk one document with the recursive splitter; chunks carry ids, counts, offsets,
    section, page and OCR origin."""
    text = document_text(document.blocks)
    placed = [
        (split_spans(text, settings, start, end), place) for start, end, place in segments(document)
    ]
    return assemble_chunks(document, text, placed, settings, count_tokens, max_tokens)


def assemble_chunks(
    document: Document,
    text: str,
    placed: list[tuple[list[Span], Place]],
    settings: SplitSettings,
    count_tokens: TokenCounter | None = None,
    max_tokens: int | None = None,
) -> SplitResult:
    """The document's chunks from each segment's spans (in document order), each span first
    fitted to the token window when a counter is given."""
    spans: list[tuple[Span, Place]] = []
    refit = over = 0
    for segment_spans, place in placed:
        fitted = segment_spans
        if count_tokens is not None and max_tokens is not None:
            fitted, n_refit, n_over = fit_token_window(
                text, segment_spans, settings, count_tokens, max_tokens
            )
            refit += n_refit
            over += n_over
        spans.extend((span, place) for span in fitted)
    count = len(spans)
    chunks = tuple(
        Chunk(
            chunk_id=chunk_id(document.doc_id, i, count),
            doc_id=document.doc_id,
            chunk_index=i,
            chunk_count=count,
            text=text[a:b],
            char_start=a,
            char_end=b,
            section=section,
            heading_level=level,
            page_number=page,
            ocr=ocr,
        )
        for i, ((a, b), (section, level, page, ocr)) in enumerate(spans)
    )
    return SplitResult(chunks, refit, over)


def split_documents(
    documents: list[Document], settings: SplitSettings, count_tokens: TokenCounter, max_tokens: int
) -> list[SplitResult]:
    """Chunk a batch of loaded documents with the recursive splitter to fit a `max_tokens`
    window (one result each)."""
    return [
        split_document(doc, settings, count_tokens, max_tokens)
        if doc.status == Status.INDEXED
        else SplitResult(())
        for doc in documents
    ]
