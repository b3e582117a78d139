"""A batch of questions, each question's lists started ahead of its ranking.

Each question is analysed (and translated) once, first (tasks/search/question.py). The
questions are embedded EMBED_SLICE at a time; in hybrid mode their full-text lists (their own
words and their translations) start first, since they need no embedding, and run beside the
embedding. The lists of the next
block of LISTS_AHEAD questions are searched while one block is ranked; a block's vector lists
come from the searcher's copy of the chunks in one product where it keeps one (issue 24;
benchmarks/RESULTS.md, "Issue 24: where a warm hybrid query's time goes"). Each question
gets the hits it gets alone (tests/test_query_equality.py).
"""

from __future__ import annotations

import numpy as np

from tasks.search.hits import Hit
from tasks.search.params import Mode, SearchParams
from tasks.search.ranking import (
    Query,
    Reading,
    Started,
    first_limit,
    routed_depth,
    search_one,
    start_text_list,
    start_translated_list,
    vector_depth,
)
from tasks.search.rerank import PairScorer

# A block of a batch's questions: the lists of the next block are searched while one is
# ranked (each question holds up to fusion depth hits per list in memory until its turn),
# its vector lists from the kept chunks in one product.
LISTS_AHEAD = 16
# A batch's questions embedded at once: enough for the encoders' batching, few enough to keep
# memory flat and the vectors within the question encoder's cache (ASKED_QUESTIONS in
# tasks/embed/dual_backend.py, which the cross-script re-scoring reads).
EMBED_SLICE = 256


class ListsAhead:
    """The questions' vectors and the lists started for them, until each is ranked."""

    def __init__(
        self, reading: Reading, texts: list[str], mode: Mode, params: SearchParams, floor: bool
    ):
        self.reading, self.texts, self.mode, self.floor = reading, texts, mode, floor
        self.questions = [reading.question(text, mode) for text in texts]  # each analysed once
        limit = first_limit(params)
        self.text_depth = max(limit, reading.fusion.depth)  # hybrid mode's list depth
        list_depth = self.text_depth if mode == "hybrid" else limit
        self.vector_depth = vector_depth(reading.embedder, list_depth)
        self.routed_depth = routed_depth(list_depth)
        self.started: dict[int, Started] = {}  # text index → its lists for the first limit
        self.vectors: dict[int, np.ndarray] = {}  # text index → its vector, until ranked
        self.routed: dict[int, np.ndarray] = {}  # text index → its routed vector, until ranked

    def vector_of(self, i: int) -> np.ndarray:
        """Question i's vector, embedding the slice that holds it where it has none yet (and
        its routed vectors, where the reading has a router)."""
        if i not in self.vectors:
            first = i - i % EMBED_SLICE
            part = self.texts[first : first + EMBED_SLICE]
            made = self.reading.embedder.encode(part)
            self.vectors.update(zip(range(first, first + len(part)), made, strict=True))
            if self.reading.router is not None:
                routed = self.reading.router.encode_routed(part)
                self.routed.update(zip(range(first, first + len(part)), routed, strict=True))
        return self.vectors[i]

    def start(self, first: int, end: int) -> None:
        """Start the lists of questions first…end-1 (those that exist)."""
        ahead = range(first, min(end, len(self.texts)))
        for i in ahead:  # the full-text lists first: they need no embedding
            lists = self.started.setdefault(i, Started())
            if self.mode == "hybrid":
                question = self.questions[i]
                lists.text = start_text_list(self.reading, question, self.text_depth, self.floor)
                lists.translated = start_translated_list(
                    self.reading, question, self.text_depth, self.floor
                )
        if self.mode != "fts":
            vectors = [self.vector_of(i) for i in ahead]
            lists_of = self.reading.source.start_vector_lists(vectors, self.vector_depth)
            for i, hits in zip(ahead, lists_of, strict=True):
                self.started[i].vector = hits
            if self.reading.router is not None:
                routed = [self.routed[i] for i in ahead]
                lists_of = self.reading.source.start_routed_lists(routed, self.routed_depth)
                for i, hits in zip(ahead, lists_of, strict=True):
                    self.started[i].routed = hits

    def take(self, i: int) -> tuple[np.ndarray | None, np.ndarray | None, Started]:
        """Question i's vector and routed vector (None in fts mode, and where the reading
        has no router) and its started lists, handed over."""
        return self.vectors.pop(i, None), self.routed.pop(i, None), self.started.pop(i)

    def cancel(self) -> None:
        """Cancel the lists not handed over (after a failure: none runs for nothing)."""
        for lists in self.started.values():
            lists.cancel()


def search_batch(
    reading: Reading,
    texts: list[str],
    mode: Mode,
    params: SearchParams,
    scorer: PairScorer | None,
) -> list[list[Hit]]:
    """Hits for each text, in order: one block's lists searched while the block before it is
    ranked."""
    floor = scorer is None and params.min_score is not None
    ahead = ListsAhead(reading, texts, mode, params, floor)
    try:
        ahead.start(0, LISTS_AHEAD)
        results = []
        for i, question in enumerate(ahead.questions):
            if i % LISTS_AHEAD == 0:  # the next block, while this one is ranked
                ahead.start(i + LISTS_AHEAD, i + 2 * LISTS_AHEAD)
            vector, routed, lists = ahead.take(i)
            query = Query(question, vector, mode, routed)
            results.append(search_one(reading, query, params, scorer, lists))
        return results
    finally:
        ahead.cancel()
