"""Search a dataset by vector, full text or both, with the filters pushed into LanceDB.

Modes and what a hit's `score` means:
- vector: cosine similarity of the question's embedding (made with the dataset's own model)
  and the chunk's (1 − cosine distance; higher is better). With the multilingual default,
  the first candidates written in another script than the question also get their best
  sentence's similarity added (tasks/embed/dual_backend.py), so a score may exceed 1.
- fts: BM25 relevance from LanceDB's native full-text index on the analysed text
  (tasks/text/analysis.py: Chinese words, stemmed English, identifiers; unbounded, higher
  is better).
- hybrid: both lists fused by their standardised scores, α·z(cosine) + β·z(BM25), the
  weights by the question's script and the dataset's model, β smaller where the full-text
  list matched few of the question's terms (tasks/search/fusion.py; unbounded, higher is
  better, comparable within one query only).

`min_score` is a floor on the cosine similarity in vector and hybrid mode (in hybrid mode it
drops candidates before fusion, since fused scores carry no absolute meaning) and on BM25 in fts
mode. Filters become one SQL prefilter in which every user value is a quoted literal (or
a LIKE pattern with its wildcards escaped), so no value is ever read as SQL.

With `rerank` (a cross-encoder folder, tasks/search/rerank.py) the chosen mode only picks
the candidates: its best max(k, rerank_depth) chunks (with per_doc, more until k documents
show, as without rerank), which the cross-encoder re-scores and re-orders. `score` is then
the cross-encoder's score (for the usual one-label models a sigmoid, 0 to 1, higher is
better), `min_score` a floor on that score, and per_doc keeps each document's best chunk by
it. Without `rerank` nothing of this runs and the cross-encoder code is not imported.

With `context` or `expand`, the chosen hits get the text around them (tasks/search/context.py).

The two lists are searched with LanceDB's async API on the process's query loop
(tasks/search/query_loop.py; the queries: tasks/dataset/chunk_store.py). Hybrid mode's
full-text list does not wait for the question's embedding: it starts first and runs beside
the embedding, the vector list and its re-scoring; a batch searches the lists of the next
questions while one is ranked (issue 24; benchmarks/RESULTS.md, "Issue 24: where a warm
hybrid query's time goes"). The hits and scores are those of a plain sequential search
(tests/test_query_equality.py).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass
from functools import cache

import numpy as np
from lancedb.table import AsyncTable

from tasks.dataset.chunk_store import async_table, matching_row_ids, matching_rows, nearest_rows
from tasks.dataset.dataset import Dataset
from tasks.dataset.location import DatasetError
from tasks.dataset.schema import SEARCH_TEXT_COLUMN, VECTOR_COLUMN, Fingerprint
from tasks.embed.base import CrossScriptRescorer, Embedder
from tasks.embed.models import model_info, model_spec_for, query_embedder
from tasks.search import query_loop
from tasks.search.context import with_context
from tasks.search.filters import search_filter
from tasks.search.fusion import Fusion, best_per_doc, fusion_for, term_coverage
from tasks.search.hits import HIT_COLUMNS, Hit
from tasks.search.kept_chunks import KeptChunks
from tasks.search.params import Mode, SearchParams
from tasks.search.rerank import PairScorer, cross_encoder, rerank
from tasks.text import analysis

PER_DOC_OVERFETCH = 5  # chunks fetched per wanted document with per_doc, grown as needed
# A block of a batch's questions: the lists of the next block are searched while one is
# ranked (each question holds up to fusion depth hits per list in memory until its turn),
# its vector lists from the kept chunks in one product.
LISTS_AHEAD = 16
# A batch's questions embedded at once: enough for the encoders' batching, few enough to keep
# memory flat and the vectors within the question encoder's cache (ASKED_QUESTIONS in
# tasks/embed/dual_backend.py, which the cross-script re-scoring reads).
EMBED_SLICE = 256


@dataclass(frozen=True)
class TextList:
    """Hybrid mode's full-text list: its hits, best first, and what the coverage gate and the
    cosine floor read of each hit (empty lists when not asked for)."""

    hits: list[Hit]
    terms: list[str]  # each hit's analysed text
    vectors: list[np.ndarray]  # each hit's stored vector

    def above(self, vector: np.ndarray, minimum: float) -> TextList:
        """The hits with at least `minimum` cosine similarity to `vector` (stored vectors are
        unit length: cosine is a dot product)."""
        kept = [i for i, row in enumerate(self.vectors) if float(np.dot(row, vector)) >= minimum]
        return TextList(
            [self.hits[i] for i in kept],
            [self.terms[i] for i in kept] if self.terms else [],
            [self.vectors[i] for i in kept],
        )


class Searcher:
    """One open dataset, searched with the model that built it; reuse it across queries.

    When the dataset was opened with a consistency interval, each query sees newer table
    versions, a rebuild with another model included: the model follows the fingerprint,
    which each search reads once.

    `keep_vectors`: keep the table's vectors (and the hits' columns) in memory and rank
    unfiltered vector lists there (tasks/search/kept_chunks.py), for a searcher that answers
    many questions; the first search, or `kept_chunks`, reads them.
    """

    def __init__(self, dataset: Dataset, keep_vectors: bool = False):
        dataset.fingerprint  # noqa: B018 - a clear DatasetError for a missing or old dataset
        self.dataset = dataset
        self._indexed: tuple[int, set[str]] = (-1, set())
        self._hit_columns: list[str] = HIT_COLUMNS
        self._keep_vectors = keep_vectors
        self._kept: KeptChunks | None = None
        self._kept_lock = threading.Lock()

    def embedder(self) -> Embedder:
        """The encoder of the dataset's model for questions, loaded once per process (torch-free
        where it can be: tasks.embed.models.query_embedder)."""
        return self._embedder_for(self.dataset.fingerprint)

    def _embedder_for(self, fp: Fingerprint) -> Embedder:
        try:
            embedder = query_embedder(fp.model)
        except Exception as exc:  # noqa: BLE001 - re-raised as the dataset's problem
            raise DatasetError(
                f"{self.dataset.uri} was built with model {fp.model}, which cannot be loaded "
                f"here: {exc}"
            ) from None
        if embedder.info.dimension != fp.dimension:
            raise DatasetError(
                f"{self.dataset.uri} holds {fp.dimension}-d vectors but model {fp.model} "
                f"makes {embedder.info.dimension}-d ones; re-index it with --rebuild"
            )
        return embedder

    def fusion(self) -> Fusion:
        """How hybrid mode weighs the lists for this dataset's model (no weights loaded)."""
        return _fusion_of(self.dataset.fingerprint.model)

    def check_model(self, model: str) -> None:
        """Refuse a dataset that was not built with `model` (a name or spec)."""
        built = self.dataset.fingerprint.model
        if model not in (built, model_spec_for(built)):
            raise DatasetError(
                f"{self.dataset.uri} was built with model {built}, not {model}; query it "
                f"without --model, or re-index it with `python -m flows.ingest DIR --model "
                f"{model} --rebuild`"
            )

    def indexed_columns(self) -> set[str]:
        """Columns of the chunks table with an index, read once per table version (with the
        columns a hit reads, `hit_columns`)."""
        version = self.dataset.chunks.version
        if self._indexed[0] != version:
            self._indexed = (version, self.dataset.indexed_columns())
            names = set(self.dataset.chunks.schema.names)
            self._hit_columns = [name for name in HIT_COLUMNS if name in names]
        return self._indexed[1]

    def hit_columns(self) -> list[str]:
        """The columns of HIT_COLUMNS that the chunks table has (one made before document
        metadata was read lacks its columns), as of the version `indexed_columns` read last:
        each search reads that first, when it resolves its mode."""
        if self._indexed[0] < 0:
            self.indexed_columns()
        return self._hit_columns

    def resolve_mode(self, mode: Mode | None) -> Mode:
        """The mode to use: hybrid by default once a full-text index exists, else vector."""
        has_fts = SEARCH_TEXT_COLUMN in self.indexed_columns()
        if mode is None:
            return "hybrid" if has_fts else "vector"
        if mode != "vector" and not has_fts:
            raise DatasetError(
                f"{self.dataset.uri} has no full-text index yet (the ingest flow creates it); "
                "use --mode vector"
            )
        return mode

    def kept_chunks(self) -> KeptChunks | None:
        """The chunks kept in memory, read again if the table has moved to a new version
        since; None where the searcher keeps none."""
        self.indexed_columns()  # reads the table's version and hit columns
        return self._kept_chunks()

    def _kept_chunks(self) -> KeptChunks | None:
        """`kept_chunks` as of the version `indexed_columns` read last (each search reads it
        first, when it resolves its mode)."""
        if not self._keep_vectors:
            return None
        version = self._indexed[0]
        with self._kept_lock:
            if self._kept is None or self._kept.version != version:
                table = async_table(self.dataset.chunks)
                self._kept = query_loop.run(KeptChunks.read(table, version, self.hit_columns()))
            return self._kept

    def nearest(self, vector: np.ndarray, where: str | None, limit: int) -> list[Hit]:
        """The `limit` chunks nearest to `vector`, scored by cosine similarity alone (no
        re-scoring): what the vector list starts from."""
        self.resolve_mode("vector")  # reads the table's version and hit columns
        table = async_table(self.dataset.chunks)
        return query_loop.run(_vector_hits(table, self.hit_columns(), where, vector, limit))

    def lists(self, text: str, vector: np.ndarray, depth: int) -> tuple[list[Hit], TextList]:
        """Hybrid mode's two lists of `depth` chunks for one question before fusion, with no
        filter: the vector hits (re-scored across scripts where the model does that) and the
        full-text list (benchmarks/quality.py tunes the fusion on them)."""
        self.resolve_mode("hybrid")
        scope = self._scope(None)
        by_text = self._start_text_list(scope, text, depth, floor=False)
        return self._by_vector(scope, text, vector, depth, None, None), by_text.result()

    def search(self, text: str, params: SearchParams) -> list[Hit]:
        return self.search_many([text], params)[0]

    def search_many(self, texts: list[str], params: SearchParams) -> list[list[Hit]]:
        """Hits for each text. The texts are embedded EMBED_SLICE at a time, in hybrid mode
        while their first full-text lists are searched; the lists of the next block of
        LISTS_AHEAD texts are searched while one block is ranked (the vector lists of a
        block from the kept chunks in one product)."""
        mode = self.resolve_mode(params.mode)
        scorer = cross_encoder(params.rerank) if params.rerank else None  # fails before embedding
        scope = self._scope(search_filter(self.dataset, params))
        limit = _first_limit(params)
        floor = scorer is None and params.min_score is not None
        text_depth = max(limit, scope.fusion.depth)  # hybrid mode's list depth
        vector_depth = _vector_depth(scope.embedder, text_depth if mode == "hybrid" else limit)
        started: dict[int, Started] = {}  # text index → its lists for the first limit
        vectors: dict[int, np.ndarray] = {}  # text index → its vector, until it is ranked

        def vector_of(i: int) -> np.ndarray:
            if i not in vectors:  # embed the slice that holds text i
                first = i - i % EMBED_SLICE
                part = texts[first : first + EMBED_SLICE]
                made = scope.embedder.encode(part)
                vectors.update(zip(range(first, first + len(part)), made, strict=True))
            return vectors[i]

        def start(first: int, end: int) -> None:
            ahead = range(first, min(end, len(texts)))
            for i in ahead:  # the full-text lists first: they need no embedding
                lists = started.setdefault(i, Started())
                if mode == "hybrid":
                    lists.text = self._start_text_list(scope, texts[i], text_depth, floor)
            if mode != "fts":
                vectors = [vector_of(i) for i in ahead]
                for i, hits in zip(
                    ahead, scope.start_vector_lists(vectors, vector_depth), strict=True
                ):
                    started[i].vector = hits

        try:
            start(0, LISTS_AHEAD)
            results = []
            for i, text in enumerate(texts):
                if i % LISTS_AHEAD == 0:  # the next block, while this one is ranked
                    start(i + LISTS_AHEAD, i + 2 * LISTS_AHEAD)
                vector = vectors.pop(i, None)
                lists = started.pop(i)
                results.append(self._search_one(scope, text, vector, mode, params, scorer, lists))
            # The text around the chosen hits, all of them in one query (none when not asked).
            return with_context(self.dataset.chunks, results, params.context, params.expand)
        finally:
            for lists in started.values():  # after a failure: none runs for nothing
                lists.cancel()

    def _scope(self, where: str | None) -> Scope:
        """What a search reads the dataset with, read once (the fingerprint of a dataset that
        follows writers is read again on each access)."""
        fp = self.dataset.fingerprint
        table = async_table(self.dataset.chunks)
        kept = self._kept_chunks() if where is None else None
        embedder, fusion = self._embedder_for(fp), _fusion_of(fp.model)
        return Scope(table, self.hit_columns(), embedder, fusion, where, kept)

    def _search_one(
        self,
        scope: Scope,
        text: str,
        vector: np.ndarray | None,
        mode: Mode,
        params: SearchParams,
        scorer: PairScorer | None,
        lists: Started,
    ) -> list[Hit]:
        """Top hits for one query; with per_doc, fetch more chunks until k documents show;
        with a cross-encoder `scorer`, re-rank the candidates first (see the module doc).
        `lists`: the lists for the first limit, where they were started already."""
        limit = _first_limit(params)
        floor = params.min_score if scorer is None else None  # else a floor on the new score
        while True:
            hits = self._ranked(scope, text, vector, mode, limit, floor, lists)
            if not params.per_doc or len(best_per_doc(hits)) >= params.k or len(hits) < limit:
                break
            limit, lists = limit * 4, Started()
        if scorer is not None:
            hits = _above(rerank(text, hits, scorer), params.min_score)
        return (best_per_doc(hits) if params.per_doc else hits)[: params.k]

    def _ranked(
        self,
        scope: Scope,
        text: str,
        vector: np.ndarray | None,
        mode: Mode,
        limit: int,
        min_score: float | None,
        lists: Started,
    ) -> list[Hit]:
        """Up to `limit` hits in `mode`, each at or above `min_score` (see the module doc),
        from the lists in `lists` where they were started already."""
        if mode == "fts":
            return _above(query_loop.run(scope.text_hits(text, limit)), min_score)
        assert vector is not None
        if mode == "vector":
            return self._by_vector(scope, text, vector, limit, min_score, lists.vector)[:limit]
        depth = max(limit, scope.fusion.depth)
        text_list = lists.text
        if text_list is None:
            text_list = self._start_text_list(scope, text, depth, min_score is not None)
        by_vector = self._by_vector(scope, text, vector, depth, min_score, lists.vector)
        by_text = text_list.result()
        if min_score is not None:
            by_text = by_text.above(vector, min_score)
        coverage = 1.0
        if scope.fusion.full_coverage is not None:
            coverage = term_coverage(analysis.query_text(text).split(), by_text.terms)
        return scope.fusion.fuse(text, by_vector, by_text.hits, limit, coverage)

    def _by_vector(
        self,
        scope: Scope,
        text: str,
        vector: np.ndarray,
        limit: int,
        min_score: float | None,
        started: Future[list[Hit]] | None,
    ) -> list[Hit]:
        """At least `limit` vector hits at or above `min_score` (a floor on the cosine), the
        first ones re-scored across scripts where the model does that, best first; `started`:
        the list of `_vector_depth` hits, where it was started already."""
        rescorer = scope.embedder
        if started is None:
            started = scope.start_vector_hits(vector, _vector_depth(rescorer, limit))
        hits = _above(started.result(), min_score)
        if not isinstance(rescorer, CrossScriptRescorer):
            return hits
        head = hits[: rescorer.rescore_depth]
        bonus = rescorer.cross_script_bonus(text, [hit.text for hit in head])
        head = [
            hit.rescored(hit.score + float(extra)) if extra else hit
            for hit, extra in zip(head, bonus, strict=True)
        ]
        return sorted(head + hits[len(head) :], key=lambda hit: -hit.score)

    def _start_text_list(
        self, scope: Scope, text: str, limit: int, floor: bool
    ) -> Future[TextList]:
        """Hybrid mode's full-text list of `limit` chunks by BM25, started on the query loop,
        with each hit's analysed text where the fusion's coverage gate reads it and, with a
        cosine `floor` to apply, its stored vector."""
        terms = scope.fusion.full_coverage is not None
        columns = [
            *scope.columns,
            *([SEARCH_TEXT_COLUMN] if terms else []),
            *([VECTOR_COLUMN] if floor else []),
        ]

        async def search() -> TextList:
            kept = await scope.kept_text_list(text, limit)
            if kept is not None and scope.kept is not None:
                at, scores = kept
                return TextList(
                    scope.kept.hits(at, scores),
                    scope.kept.analysed(at) if terms else [],
                    scope.kept.vectors_of(at) if floor else [],
                )
            rows = await matching_rows(scope.table, text, columns, scope.where, limit)
            return TextList(
                [Hit.from_row(row, row["_score"]) for row in rows],
                [row[SEARCH_TEXT_COLUMN] for row in rows] if terms else [],
                [row[VECTOR_COLUMN] for row in rows] if floor else [],
            )

        return query_loop.submit(search())


@dataclass(frozen=True)
class Scope:
    """What one search reads the dataset with (`Searcher._scope`)."""

    table: AsyncTable  # the chunks table's async handle
    columns: list[str]  # the hit columns the table has
    embedder: Embedder
    fusion: Fusion
    where: str | None  # the search's prefilter
    kept: KeptChunks | None = None  # the searcher's chunks in memory; none with a prefilter

    def start_vector_hits(self, vector: np.ndarray, limit: int) -> Future[list[Hit]]:
        """The `limit` chunks nearest to `vector`: from the kept chunks at once where the
        searcher keeps them, else a LanceDB search started on the query loop."""
        return self.start_vector_lists([vector], limit)[0]

    def start_vector_lists(self, vectors: list[np.ndarray], limit: int) -> list[Future[list[Hit]]]:
        """`start_vector_hits` of each vector; from the kept chunks, in one product."""
        if self.kept is None or not self.kept.kept:
            return [query_loop.submit(self.vector_hits(vector, limit)) for vector in vectors]
        done: list[Future[list[Hit]]] = []
        for hits in self.kept.nearest_each(np.stack(vectors), limit) if vectors else []:
            done.append(Future())
            done[-1].set_result(hits)
        return done

    async def vector_hits(self, vector: np.ndarray, limit: int) -> list[Hit]:
        """LanceDB's `limit` chunks nearest to `vector`."""
        return await _vector_hits(self.table, self.columns, self.where, vector, limit)

    async def text_hits(self, text: str, limit: int) -> list[Hit]:
        """Up to `limit` chunks by BM25, best first: their rows from the kept chunks where
        the searcher keeps them all, else LanceDB's."""
        kept = await self.kept_text_list(text, limit)
        if kept is not None and self.kept is not None:
            return self.kept.hits(*kept)
        return await _text_hits(self.table, self.columns, self.where, text, limit)

    async def kept_text_list(self, text: str, limit: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The full-text list as (rows of the kept chunks, BM25 scores), best first; None
        where the searcher keeps no chunks (or a filter applies), or the copy lacks a row
        (one written since it was read: LanceDB's rows answer)."""
        if self.kept is None or not self.kept.kept or self.kept.search_text is None:
            return None
        ids, scores = await matching_row_ids(self.table, text, limit)
        rows = self.kept.positions(ids)
        return None if rows is None else (rows, scores)


@dataclass
class Started:
    """A question's lists for its first limit, started ahead of its ranking (none: not yet)."""

    text: Future[TextList] | None = None
    vector: Future[list[Hit]] | None = None

    def cancel(self) -> None:
        for work in (self.text, self.vector):
            if work is not None:
                work.cancel()


async def _vector_hits(
    table: AsyncTable, columns: list[str], where: str | None, vector: np.ndarray, limit: int
) -> list[Hit]:
    """Up to `limit` chunks nearest to `vector`, by cosine similarity."""
    rows = await nearest_rows(table, vector, columns, where, limit)
    return [Hit.from_row(row, 1.0 - row["_distance"]) for row in rows]


async def _text_hits(
    table: AsyncTable, columns: list[str], where: str | None, text: str, limit: int
) -> list[Hit]:
    """Up to `limit` chunks by BM25, best first."""
    rows = await matching_rows(table, text, columns, where, limit)
    return [Hit.from_row(row, row["_score"]) for row in rows]


def _vector_depth(embedder: Embedder, limit: int) -> int:
    """The vector hits fetched for a list of `limit`: at least the cross-script re-scoring's
    depth where the model re-scores."""
    if isinstance(embedder, CrossScriptRescorer):
        return max(limit, embedder.rescore_depth)
    return limit


def _first_limit(params: SearchParams) -> int:
    """The hits a search ranks first: k, more with per_doc, at least rerank_depth with a
    cross-encoder."""
    limit = params.k * PER_DOC_OVERFETCH if params.per_doc else params.k
    return max(limit, params.rerank_depth) if params.rerank else limit


@cache
def _fusion_of(model_id: str) -> Fusion:
    """The fusion for a model id, read once per process from the model's configuration."""
    return fusion_for(model_info(model_spec_for(model_id)).multilingual)


def _above(hits: list[Hit], min_score: float | None) -> list[Hit]:
    return hits if min_score is None else [hit for hit in hits if hit.score >= min_score]
