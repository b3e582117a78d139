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

Hybrid mode's full-text list does not wait for the question's embedding: it starts on a kept
pool thread first (LanceDB releases the GIL while it searches) and runs beside the embedding,
the vector list and its re-scoring (issue 24; benchmarks/RESULTS.md, "Query latency and the
vector index"). The hits and scores are those of a plain sequential search
(tests/test_query_equality.py).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache

import numpy as np

from tasks.dataset.dataset import Dataset
from tasks.dataset.location import DatasetError
from tasks.dataset.schema import SEARCH_TEXT_COLUMN, VECTOR_COLUMN
from tasks.embed.base import CrossScriptRescorer, Embedder
from tasks.embed.models import model_info, model_spec_for, query_embedder
from tasks.search.context import with_context
from tasks.search.filters import search_filter
from tasks.search.fusion import Fusion, best_per_doc, fusion_for, term_coverage
from tasks.search.hits import HIT_COLUMNS, Hit
from tasks.search.params import Mode, SearchParams
from tasks.search.rerank import PairScorer, cross_encoder, rerank
from tasks.text import analysis

PER_DOC_OVERFETCH = 5  # chunks fetched per wanted document with per_doc, grown as needed
# Full-text lists that run at once beside their searches' other steps, in the whole process:
# as many as the service runs searches at once (flows/service.py, SEARCH_THREADS).
TEXT_LIST_THREADS = 8
# A batch's full-text lists started ahead of the question being ranked (each holds up to
# fusion depth rows in memory until its question's turn).
TEXT_LISTS_AHEAD = 2 * TEXT_LIST_THREADS


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
    versions, a rebuild with another model included: the model follows the fingerprint.
    """

    def __init__(self, dataset: Dataset):
        dataset.fingerprint  # noqa: B018 - a clear DatasetError for a missing or old dataset
        self.dataset = dataset
        self._indexed: tuple[int, set[str]] = (-1, set())
        self._hit_columns: list[str] = HIT_COLUMNS

    def embedder(self) -> Embedder:
        """The encoder of the dataset's model for questions, loaded once per process (torch-free
        where it can be: tasks.embed.models.query_embedder)."""
        fp = self.dataset.fingerprint
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

    def search(self, text: str, params: SearchParams) -> list[Hit]:
        return self.search_many([text], params)[0]

    def search_many(self, texts: list[str], params: SearchParams) -> list[list[Hit]]:
        """Hits for each text; the texts are embedded in one batch, in hybrid mode while
        their full-text lists are searched."""
        mode = self.resolve_mode(params.mode)
        scorer = cross_encoder(params.rerank) if params.rerank else None  # fails before embedding
        where = search_filter(self.dataset, params)
        started: dict[int, Future[TextList]] = {}  # text index → its full-text list

        def start(first: int, end: int) -> None:
            if mode == "hybrid":
                depth = max(_first_limit(params), self.fusion().depth)
                floor = scorer is None and params.min_score is not None
                for i in range(first, min(end, len(texts))):
                    started[i] = self._start_text_list(texts[i], where, depth, floor)

        start(0, TEXT_LISTS_AHEAD)
        try:
            vectors: list[np.ndarray | None] = (
                list(self.embedder().encode(texts)) if mode != "fts" else [None] * len(texts)
            )
            results = []
            for i, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
                start(i + TEXT_LISTS_AHEAD, i + TEXT_LISTS_AHEAD + 1)
                text_list = started.pop(i, None)
                results.append(
                    self._search_one(text, vector, mode, where, params, scorer, text_list)
                )
            # The text around the chosen hits, all of them in one query (none when not asked).
            return with_context(self.dataset.chunks, results, params.context, params.expand)
        finally:
            for text_list in started.values():  # after a failure: none runs for nothing
                text_list.cancel()

    def _search_one(
        self,
        text: str,
        vector: np.ndarray | None,
        mode: Mode,
        where: str | None,
        params: SearchParams,
        scorer: PairScorer | None = None,
        text_list: Future[TextList] | None = None,
    ) -> list[Hit]:
        """Top hits for one query; with per_doc, fetch more chunks until k documents show;
        with a cross-encoder `scorer`, re-rank the candidates first (see the module doc).
        `text_list`: hybrid mode's full-text list for the first limit, already started."""
        limit = _first_limit(params)
        floor = params.min_score if scorer is None else None  # else a floor on the new score
        while True:
            hits = self._ranked(text, vector, mode, where, limit, floor, text_list)
            if not params.per_doc or len(best_per_doc(hits)) >= params.k or len(hits) < limit:
                break
            limit, text_list = limit * 4, None
        if scorer is not None:
            hits = _above(rerank(text, hits, scorer), params.min_score)
        return (best_per_doc(hits) if params.per_doc else hits)[: params.k]

    def _ranked(
        self,
        text: str,
        vector: np.ndarray | None,
        mode: Mode,
        where: str | None,
        limit: int,
        min_score: float | None,
        text_list: Future[TextList] | None = None,
    ) -> list[Hit]:
        """Up to `limit` hits in `mode`, each at or above `min_score` (see the module doc);
        in hybrid mode with the full-text list `text_list` where it was started already."""
        if mode == "fts":
            return _above(self._fts(text, where, limit), min_score)
        assert vector is not None
        if mode == "vector":
            return self._by_vector(text, vector, where, limit, min_score)[:limit]
        fusion = self.fusion()
        depth = max(limit, fusion.depth)
        if text_list is None:
            text_list = self._start_text_list(text, where, depth, min_score is not None)
        by_vector = self._by_vector(text, vector, where, depth, min_score)
        by_text = text_list.result()
        if min_score is not None:
            by_text = by_text.above(vector, min_score)
        coverage = 1.0
        if fusion.full_coverage is not None:
            coverage = term_coverage(analysis.query_text(text).split(), by_text.terms)
        return fusion.fuse(text, by_vector, by_text.hits, limit, coverage)

    def _by_vector(
        self,
        text: str,
        vector: np.ndarray,
        where: str | None,
        limit: int,
        min_score: float | None,
    ) -> list[Hit]:
        """At least `limit` vector hits at or above `min_score` (a floor on the cosine), the
        first ones re-scored across scripts where the model does that, best first."""
        rescorer = self.embedder()
        if not isinstance(rescorer, CrossScriptRescorer):
            return _above(self._vector(vector, where, limit), min_score)
        depth = max(limit, rescorer.rescore_depth)
        hits = _above(self._vector(vector, where, depth), min_score)
        head = hits[: rescorer.rescore_depth]
        bonus = rescorer.cross_script_bonus(text, [hit.text for hit in head])
        head = [
            hit.rescored(hit.score + float(extra)) if extra else hit
            for hit, extra in zip(head, bonus, strict=True)
        ]
        return sorted(head + hits[len(head) :], key=lambda hit: -hit.score)

    def _vector(self, vector: np.ndarray, where: str | None, limit: int) -> list[Hit]:
        rows = self.dataset.nearest(vector, self.hit_columns(), where, limit)
        return [Hit.from_row(row, 1.0 - row["_distance"]) for row in rows]

    def _fts(self, text: str, where: str | None, limit: int) -> list[Hit]:
        """Up to `limit` chunks by BM25, best first."""
        rows = self.dataset.matching(text, self.hit_columns(), where, limit)
        return [Hit.from_row(row, row["_score"]) for row in rows]

    def _start_text_list(
        self, text: str, where: str | None, limit: int, floor: bool
    ) -> Future[TextList]:
        """Hybrid mode's full-text list of `limit` chunks by BM25, searched on a pool thread,
        with each hit's analysed text where the fusion's coverage gate reads it and, with a
        cosine `floor` to apply, its stored vector."""
        terms = self.fusion().full_coverage is not None
        columns = [
            *self.hit_columns(),
            *([SEARCH_TEXT_COLUMN] if terms else []),
            *([VECTOR_COLUMN] if floor else []),
        ]

        def search() -> TextList:
            rows = self.dataset.matching(text, columns, where, limit)
            return TextList(
                [Hit.from_row(row, row["_score"]) for row in rows],
                [row[SEARCH_TEXT_COLUMN] for row in rows] if terms else [],
                [row[VECTOR_COLUMN] for row in rows] if floor else [],
            )

        return _text_list_pool().submit(search)


def _first_limit(params: SearchParams) -> int:
    """The hits a search ranks first: k, more with per_doc, at least rerank_depth with a
    cross-encoder."""
    limit = params.k * PER_DOC_OVERFETCH if params.per_doc else params.k
    return max(limit, params.rerank_depth) if params.rerank else limit


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _text_list_pool() -> ThreadPoolExecutor:
    """The process's pool for full-text lists: made on first use, its threads kept."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(TEXT_LIST_THREADS, thread_name_prefix="text-list")
        return _pool


@cache
def _fusion_of(model_id: str) -> Fusion:
    """The fusion for a model id, read once per process from the model's configuration."""
    return fusion_for(model_info(model_spec_for(model_id)).multilingual)


def _above(hits: list[Hit], min_score: float | None) -> list[Hit]:
    return hits if min_score is None else [hit for hit in hits if hit.score >= min_score]
