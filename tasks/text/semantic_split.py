"""The semantic splitter: cut a section between sentences where the meaning changes.

`--splitter semantic`, after the semantic chunkers of LangChain and LlamaIndex. Each section
or page segment (the same segments as the recursive splitter's, tasks/text/split.py) is
split into sentences, every sentence is embedded, and at each gap between two sentences the
cosine distance between the text just before and just after it is measured: the mean vector
of up to WINDOW sentences on each side. A segment is cut at every gap whose distance exceeds
the `breakpoint_percentile`-th percentile of all the document's gap distances (so a document
is cut where it changes most, relative to itself). A group of sentences still longer than
`chunk_size` characters is cut again at its most distant gap until it fits, and the chunks
are then fitted to the model's token window like the recursive splitter's. Chunks do not
overlap (`chunk_overlap` is the recursive splitter's), and they are spans of the document
text: `text == document_text[char_start:char_end]`.

The embedding function is passed in (the ingest step passes the dataset's own model), so
the text layer never imports the embed layer. The sentences of a whole batch of documents
are embedded in one call.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import regex

from tasks.core.reasons import Status
from tasks.core.records import Document, document_text
from tasks.text.split import (
    Place,
    Span,
    SplitResult,
    SplitSettings,
    TokenCounter,
    assemble_chunks,
    segments,
    split_spans,
    strip_span,
)

Embed = Callable[[list[str]], np.ndarray]  # texts → one vector per text

WINDOW = 2  # sentences on each side of a gap whose mean vectors are compared

# A sentence ends after . ! ? (with closing quotes or brackets) when whitespace follows, after
# the Chinese full stop, exclamation or question mark (with closing quotes), and at a line break.
_SENTENCE_END = regex.compile(r"[.!?]+[\"'”’)\]]*(?=\s)|[。！？]+[”’」』）]*|\n")


def sentence_spans(text: str, start: int, end: int, max_chars: int) -> list[Span]:
    """The sentences of text[start:end], whitespace-trimmed, in order; a sentence longer than
    `max_chars` is cut into pieces by the recursive splitter (no overlap)."""
    bounds, pos = [], start
    for match in _SENTENCE_END.finditer(text, start, end):
        bounds.append((pos, match.end()))
        pos = match.end()
    bounds.append((pos, end))
    pieces = SplitSettings(chunk_size=max_chars, chunk_overlap=0)
    spans: list[Span] = []
    for a, b in bounds:
        span = strip_span(text, (a, b))
        if span is None:
            continue
        if span[1] - span[0] <= max_chars:
            spans.append(span)
        else:
            spans.extend(split_spans(text, pieces, span[0], span[1]))
    return spans


def gap_distances(vectors: np.ndarray, window: int = WINDOW) -> np.ndarray:
    """For each gap between consecutive rows, the cosine distance between the mean of up to
    `window` rows before it and the mean of up to `window` rows after it (0 to 2)."""
    distances = np.zeros(max(len(vectors) - 1, 0))
    for gap in range(len(distances)):
        before = vectors[max(0, gap - window + 1) : gap + 1].sum(axis=0)
        after = vectors[gap + 1 : gap + 1 + window].sum(axis=0)
        norms = float(np.linalg.norm(before) * np.linalg.norm(after))
        distances[gap] = 1.0 - float(np.dot(before, after)) / norms if norms > 0 else 1.0
    return distances


def group_sentences(
    sentences: list[Span], distances: np.ndarray, threshold: float | None, max_chars: int
) -> list[Span]:
    """Chunk spans from sentences: cut at every gap whose distance exceeds `threshold`, then
    cut a group longer than `max_chars` at its most distant gap until every group fits
    (a single sentence is never longer: sentence_spans cut it)."""
    groups: list[tuple[int, int]] = []  # [first, last) sentence indices
    first = 0
    for gap, distance in enumerate(distances):
        if threshold is not None and distance > threshold:
            groups.append((first, gap + 1))
            first = gap + 1
    if sentences:
        groups.append((first, len(sentences)))
    fitted: list[Span] = []
    todo = list(reversed(groups))  # a stack, so groups come out in document order
    while todo:
        lo, hi = todo.pop()
        if hi - lo == 1 or sentences[hi - 1][1] - sentences[lo][0] <= max_chars:
            fitted.append((sentences[lo][0], sentences[hi - 1][1]))
            continue
        cut = lo + 1 + int(np.argmax(distances[lo : hi - 1]))  # first sentence after the gap
        todo.extend([(cut, hi), (lo, cut)])
    return fitted


def semantic_spans(
    text: str, settings: SplitSettings, embed: Embed, start: int = 0, end: int | None = None
) -> list[Span]:
    """Chunk spans of text[start:end] taken as one segment of one document."""
    sentences = sentence_spans(text, start, len(text) if end is None else end, settings.chunk_size)
    if not sentences:
        return []
    distances = gap_distances(embed([text[a:b] for a, b in sentences]))
    threshold = _threshold(distances, settings.breakpoint_percentile)
    return group_sentences(sentences, distances, threshold, settings.chunk_size)


def _threshold(distances: np.ndarray, percentile: float) -> float | None:
    """The document's breakpoint: that percentile of its gap distances (None without gaps)."""
    return float(np.percentile(distances, percentile)) if distances.size else None


def split_documents_semantic(
    documents: list[Document],
    settings: SplitSettings,
    count_tokens: TokenCounter,
    max_tokens: int,
    embed: Embed,
) -> list[SplitResult]:
    """Chunk a batch of loaded documents with the semantic splitter to fit a `max_tokens`
    window (one result each); the sentences of all of them are embedded in one call."""
    prepared: list[tuple[Document, str, list[tuple[list[Span], Place]]] | None] = []
    texts: list[str] = []
    for document in documents:
        if document.status != Status.INDEXED:
            prepared.append(None)
            continue
        text = document_text(document.blocks)
        placed = [
            (sentence_spans(text, start, end, settings.chunk_size), place)
            for start, end, place in segments(document)
        ]
        prepared.append((document, text, placed))
        texts.extend(text[a:b] for sentences, _ in placed for a, b in sentences)
    vectors = embed(texts) if texts else np.zeros((0, 1), np.float32)
    no_overlap = settings.model_copy(update={"chunk_overlap": 0})  # for token-window refits
    results: list[SplitResult] = []
    row = 0
    for item in prepared:
        if item is None:
            results.append(SplitResult(()))
            continue
        document, text, placed = item
        distances = []
        for sentences, _ in placed:
            distances.append(gap_distances(vectors[row : row + len(sentences)]))
            row += len(sentences)
        every_gap = np.concatenate(distances) if distances else np.zeros(0)
        threshold = _threshold(every_gap, settings.breakpoint_percentile)
        grouped = [
            (group_sentences(sentences, gaps, threshold, settings.chunk_size), place)
            for (sentences, place), gaps in zip(placed, distances, strict=True)
        ]
        results.append(
            assemble_chunks(document, text, grouped, no_overlap, count_tokens, max_tokens)
        )
    return results
