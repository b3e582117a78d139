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

Where the parts are: the two lists' sources, LanceDB or the searcher's copy of the chunks,
chosen once per search (tasks/search/sources.py); the ranking of one question by mode,
fusion, per_doc and cross-encoder (tasks/search/ranking.py); a batch's lists started a block
ahead of their ranking (tasks/search/batch.py). Hybrid mode's full-text list does not wait
for the question's embedding: it starts first and runs beside the embedding, the vector list
and its re-scoring. The hits and scores are those of a plain sequential search
(tests/test_query_equality.py).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from functools import cache

import numpy as np

from tasks.dataset.chunk_store import async_table
from tasks.dataset.dataset import Dataset
from tasks.dataset.location import DatasetError
from tasks.dataset.schema import SEARCH_TEXT_COLUMN, Fingerprint
from tasks.dataset.vocabulary import Vocabulary
from tasks.embed.base import Embedder, RoutedQuestions
from tasks.embed.models import model_info, model_spec_for, query_embedder
from tasks.search import query_loop
from tasks.search.batch import search_batch
from tasks.search.context import with_context
from tasks.search.filters import search_filter
from tasks.search.fusion import Fusion, fusion_for
from tasks.search.hits import HIT_COLUMNS, Hit
from tasks.search.kept_chunks import KeptChunks
from tasks.search.params import Mode, SearchParams
from tasks.search.question import Question
from tasks.search.ranking import (
    Query,
    Reading,
    Started,
    by_vector,
    start_text_list,
    start_translated_list,
)
from tasks.search.rerank import cross_encoder
from tasks.search.sources import LanceSource, TextList, source_for

# How often a searcher looks for a new vocabulary while its own describes an older chunks
# version (a run between its last commit and the vocabulary's refresh, or after a restore).
VOCABULARY_RECHECK = 5.0


@dataclass(frozen=True)
class Lists:
    """Hybrid mode's lists for one question before fusion: the vector hits (re-scored across
    scripts where the model does that), the full-text list of its own words, and that of its
    translations (empty where it has none)."""

    question: Question
    vector: list[Hit]
    text: TextList
    translated: list[Hit]


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
        self._vocabulary: _KeptVocabulary | None = None

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
        lance = LanceSource(async_table(self.dataset.chunks), self.hit_columns(), where)
        return query_loop.run(lance.vector_hits(vector, limit))

    def lists(self, text: str, vector: np.ndarray, depth: int) -> Lists:
        """Hybrid mode's lists of `depth` chunks for one question before fusion, with no
        filter (benchmarks/quality.py tunes the fusion on them)."""
        self.resolve_mode("hybrid")
        reading = self._reading(None)
        question = reading.question(text, "hybrid")
        by_text = start_text_list(reading, question, depth, floor=False)
        translated = start_translated_list(reading, question, depth, floor=False)
        router = reading.router
        routed = router.encode_routed([text])[0] if router is not None else None
        query = Query(question, vector, "hybrid", routed)
        return Lists(
            question,
            by_vector(reading, query, depth, None, Started()),
            by_text.result(),
            translated.result().hits if translated is not None else [],
        )

    def search(self, text: str, params: SearchParams) -> list[Hit]:
        return self.search_many([text], params)[0]

    def search_many(self, texts: list[str], params: SearchParams) -> list[list[Hit]]:
        """Hits for each text (tasks/search/batch.py: their lists started a block ahead),
        then the text around the chosen hits, all of them in one query (none when not asked)."""
        mode = self.resolve_mode(params.mode)
        scorer = cross_encoder(params.rerank) if params.rerank else None  # fails before embedding
        reading = self._reading(search_filter(self.dataset, params), mode)
        results = search_batch(reading, texts, mode, params, scorer)
        return with_context(self.dataset.chunks, results, params.context, params.expand)

    def _reading(self, where: str | None, mode: Mode = "hybrid") -> Reading:
        """What a search in `mode` reads the dataset with, read once (the fingerprint of a
        dataset that follows writers is read again on each access): LanceDB's rows with the
        filter `where`, or the kept chunks where there is none; the router where the mode
        embeds the question and the dataset holds the chunks it routes."""
        fp = self.dataset.fingerprint
        table = async_table(self.dataset.chunks)
        kept = self._kept_chunks() if where is None else None
        source = source_for(table, self.hit_columns(), where, kept)
        fusion = _fusion_of(fp.model)
        vocabulary = self.vocabulary() if fusion.translated_weight or fp.routed_dimension else None
        embedder = self._embedder_for(fp)
        router = None
        if isinstance(embedder, RoutedQuestions) and vocabulary is not None and mode != "fts":
            if fp.routed_dimension and vocabulary.languages & embedder.routed_languages:
                router = embedder  # the dataset holds chunks the model routes
                try:  # its second encoder loads beside the search's start
                    router.warm_up_routed()
                except RuntimeError as exc:
                    raise DatasetError(f"{self.dataset.uri}: {exc}") from None
        if not fusion.translated_weight:
            vocabulary = None
        return Reading(source, embedder, fusion, vocabulary, router, _reads_headings(fp.model))

    def vocabulary(self) -> Vocabulary | None:
        """The dataset's vocabulary (tasks/dataset/vocabulary.py), as of the chunks version
        `indexed_columns` read last: read again once the table has moved on, or, while it
        describes another version (a run has not made it anew yet), every VOCABULARY_RECHECK
        seconds. A searcher that keeps the chunks keeps every term. None where the dataset
        has none yet."""
        version, now = self._indexed[0], time.monotonic()
        with self._kept_lock:
            kept = self._vocabulary
            if kept is not None and kept.version == version:
                current = kept.found is None or kept.found.made_from == version
                if current or now - kept.read_at < VOCABULARY_RECHECK:
                    return kept.found
            found = self.dataset.vocabulary()
            if found is not None and self._keep_vectors:
                found.load()
            self._vocabulary = _KeptVocabulary(version, now, found)
            return found


@dataclass(frozen=True)
class _KeptVocabulary:
    version: int  # the chunks version it was read for
    read_at: float  # time.monotonic() of the read
    found: Vocabulary | None


@cache
def _reads_headings(model_id: str) -> bool:
    """Whether a model embeds a chunk's heading path before its text, read once per process."""
    return model_info(model_spec_for(model_id)).headings


@cache
def _fusion_of(model_id: str) -> Fusion:
    """The fusion for a model id, read once per process from the model's configuration."""
    info = model_info(model_spec_for(model_id))
    return fusion_for(info.multilingual, routed=bool(info.routed_dimension))
