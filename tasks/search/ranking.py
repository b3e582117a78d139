"""One question's hits from its lists: by mode, hybrid fusion, per_doc and the cross-encoder
(what each mode's score means: tasks/search/searcher.py).

A `Reading` is what one search reads the dataset with, fixed when it starts: the source of
its lists (tasks/search/sources.py), the question encoder, the fusion and the vocabulary the
questions are translated with (tasks/search/question.py). `search_one` ranks a question from
the lists started for it ahead (`Started`, tasks/search/batch.py) or, where none were, from
lists it starts itself. Hybrid mode has up to three: the vectors, the question's own words,
and its words translated into the dataset's other languages (only where it has any).
"""

from __future__ import annotations

import math
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from tasks.dataset.vocabulary import Vocabulary
from tasks.embed.base import CrossScriptRescorer, Embedder, RoutedQuestions, model_input
from tasks.search import query_loop
from tasks.search.fusion import Fusion, best_per_doc, term_coverage
from tasks.search.hits import Hit
from tasks.search.params import Mode, SearchParams
from tasks.search.question import Question, ask
from tasks.search.rerank import PairScorer, rerank
from tasks.search.sources import ChunkSource, TextList

PER_DOC_OVERFETCH = 5  # chunks fetched per wanted document with per_doc, grown as needed


@dataclass(frozen=True)
class Reading:
    """What one search reads the dataset with (`Searcher._reading`)."""

    source: ChunkSource
    embedder: Embedder  # the dataset's question encoder
    fusion: Fusion  # how hybrid mode weighs the lists for the dataset's model
    vocabulary: Vocabulary | None = None  # what questions are translated with; None: not
    # Where the dataset's model routes some chunks to a second model and the dataset holds
    # them: the question encoder, which scores those chunks (`by_vector`); else None.
    router: RoutedQuestions | None = None
    headings: bool = False  # the model read each chunk's heading path before its text

    def question(self, text: str, mode: Mode) -> Question:
        """`text` analysed once, translated for hybrid mode where the dataset has a
        vocabulary (fts and vector mode search the question's own words and meaning)."""
        return ask(text, self.vocabulary if mode == "hybrid" else None)


@dataclass(frozen=True)
class Query:
    """One question as it is ranked: the question, its vector (None in fts mode) and the mode
    (the service's request calls its text a Question too: tasks/search/request.py)."""

    question: Question
    vector: np.ndarray | None
    mode: Mode
    routed_vector: np.ndarray | None = None  # its routed model's vector (Reading.router)


@dataclass
class Started:
    """A question's lists for its first limit, started ahead of its ranking (none: not yet)."""

    text: Future[TextList] | None = None
    vector: Future[list[Hit]] | None = None
    translated: Future[TextList] | None = None
    routed: Future[list[Hit]] | None = None

    def cancel(self) -> None:
        for work in (self.text, self.vector, self.translated, self.routed):
            if work is not None:
                work.cancel()


def start_vector_list(reading: Reading, vector: np.ndarray, limit: int) -> Future[list[Hit]]:
    """The `limit` chunks nearest to `vector`, by cosine similarity alone (no re-scoring)."""
    return reading.source.start_vector_lists([vector], limit)[0]


def start_routed_list(reading: Reading, vector: np.ndarray, limit: int) -> Future[list[Hit]]:
    """The `limit` chunks whose routed vectors are nearest to `vector` (the question's routed
    model's), by cosine similarity alone."""
    return reading.source.start_routed_lists([vector], limit)[0]


def start_text_list(
    reading: Reading, question: Question, limit: int, floor: bool
) -> Future[TextList]:
    """Hybrid mode's full-text list of `limit` chunks by BM25 of the question's own words,
    started on the query loop, with each hit's analysed text where the fusion's coverage gate
    reads it and, with a cosine `floor` to apply, its stored vector."""
    analysed = reading.fusion.full_coverage is not None
    terms = question.weighted_terms
    return query_loop.submit(reading.source.text_list(terms, limit, analysed, floor))


def start_translated_list(
    reading: Reading, question: Question, limit: int, floor: bool
) -> Future[TextList] | None:
    """Hybrid mode's third list: `limit` chunks by BM25 of the question's translated words
    (tasks/search/question.py), with their stored vectors for a cosine `floor`; None where the
    question has no translation."""
    if not question.translations:
        return None
    terms = question.translations
    return query_loop.submit(reading.source.text_list(terms, limit, False, floor))


def search_one(
    reading: Reading,
    query: Query,
    params: SearchParams,
    scorer: PairScorer | None,
    lists: Started,
) -> list[Hit]:
    """Top hits for one query; with per_doc, fetch more chunks until k documents show; with a
    cross-encoder `scorer`, re-rank the candidates first (tasks/search/searcher.py).
    `lists`: the lists for the first limit, where they were started already."""
    limit = first_limit(params)
    floor = params.min_score if scorer is None else None  # else a floor on the new score
    while True:
        hits = ranked(reading, query, limit, floor, lists)
        if not params.per_doc or len(best_per_doc(hits)) >= params.k or len(hits) < limit:
            break
        limit, lists = limit * 4, Started()
    if scorer is not None:
        hits = above(rerank(query.question.text, hits, scorer), params.min_score)
    return (best_per_doc(hits) if params.per_doc else hits)[: params.k]


def ranked(
    reading: Reading, query: Query, limit: int, min_score: float | None, lists: Started
) -> list[Hit]:
    """Up to `limit` hits in the query's mode, each at or above `min_score` (a floor on the
    cosine in vector and hybrid mode, on BM25 in fts mode), from the lists in `lists` where
    they were started already."""
    question, vector, mode = query.question, query.vector, query.mode
    if mode == "fts":
        found = query_loop.run(reading.source.text_hits(question.weighted_terms, limit))
        return above(found, min_score)
    assert vector is not None
    if mode == "vector":
        return by_vector(reading, query, limit, min_score, lists)[:limit]
    depth = max(limit, reading.fusion.depth)
    floor = min_score is not None
    text_list = lists.text or start_text_list(reading, question, depth, floor)
    translated_list = lists.translated or start_translated_list(reading, question, depth, floor)
    vectors = by_vector(reading, query, depth, min_score, lists)
    by_text = text_list.result()
    translated = translated_list.result() if translated_list is not None else None
    if min_score is not None:
        by_text = by_text.above(vector, min_score)
        translated = translated.above(vector, min_score) if translated is not None else None
    coverage = 1.0
    if reading.fusion.full_coverage is not None:
        coverage = term_coverage(list(question.terms), by_text.terms)
    by_translation = translated.hits if translated is not None else []
    return reading.fusion.fuse(question, vectors, by_text.hits, limit, coverage, by_translation)


def by_vector(
    reading: Reading,
    query: Query,
    limit: int,
    min_score: float | None,
    lists: Started,
) -> list[Hit]:
    """At least `limit` vector hits at or above `min_score` (a floor on the cosine), best
    first, from the lists in `lists` where they were started already: the first ones
    re-scored across scripts where the model does that; where the reading has a router, the
    chunks it routes ranked by their routed vectors instead (`routed`)."""
    question, vector = query.question, query.vector
    assert vector is not None
    embedder, router = reading.embedder, reading.router
    started = lists.vector or start_vector_list(reading, vector, vector_depth(embedder, limit))
    hits = started.result()
    if router is not None:
        hits = [hit for hit in hits if not router.routes(_input_of(hit, reading.headings))]
    hits = above(hits, min_score)
    if isinstance(embedder, CrossScriptRescorer):
        head = hits[: embedder.rescore_depth]
        bonus = embedder.cross_script_bonus(question.text, [hit.text for hit in head])
        head = [
            hit.rescored(hit.score + float(extra)) if extra else hit
            for hit, extra in zip(head, bonus, strict=True)
        ]
        hits = sorted(head + hits[len(head) :], key=lambda hit: -hit.score)
    if router is None:
        return hits
    others = above(routed(reading, query, limit, lists), min_score)
    return sorted(hits + others, key=lambda hit: -hit.score)


def routed(reading: Reading, query: Query, limit: int, lists: Started) -> list[Hit]:
    """The chunks the reading's router routes, nearest to the question's routed vector (at
    least ROUTED_DEPTH of them), each scored by its cosine's standard score among them, put
    on the first model's scale (RoutedQuestions.routed_score): the routed model's cosines
    shift with the question's language and the passages' length, their order does not."""
    router = reading.router
    assert router is not None and query.routed_vector is not None
    depth = routed_depth(limit)
    started = lists.routed or start_routed_list(reading, query.routed_vector, depth)
    found = started.result()
    cosines = [hit.score for hit in found]
    mean = math.fsum(cosines) / len(cosines) if cosines else 0.0
    spread = (
        math.sqrt(math.fsum((c - mean) ** 2 for c in cosines) / len(cosines)) if cosines else 0.0
    )
    return [
        hit.rescored(router.routed_score((c - mean) / spread if spread else 0.0))
        for hit, c in zip(found, cosines, strict=True)
    ][:limit]


# The routed candidates whose cosines a routed chunk's standard score is taken among, however
# few hits are asked for: the same score for a chunk in every mode and for every k up to it.
ROUTED_DEPTH = 50


def routed_depth(limit: int) -> int:
    return max(limit, ROUTED_DEPTH)


def _input_of(hit: Hit, headings: bool) -> str:
    return model_input(hit.text, hit.section, headings)


def vector_depth(embedder: Embedder, limit: int) -> int:
    """The vector hits fetched for a list of `limit`: at least the cross-script re-scoring's
    depth where the model re-scores."""
    if isinstance(embedder, CrossScriptRescorer):
        return max(limit, embedder.rescore_depth)
    return limit


def first_limit(params: SearchParams) -> int:
    """The hits a search ranks first: k, more with per_doc, at least rerank_depth with a
    cross-encoder."""
    limit = params.k * PER_DOC_OVERFETCH if params.per_doc else params.k
    return max(limit, params.rerank_depth) if params.rerank else limit


def above(hits: list[Hit], min_score: float | None) -> list[Hit]:
    return hits if min_score is None else [hit for hit in hits if hit.score >= min_score]
