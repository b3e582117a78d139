"""The searcher's hits equal those of a plain, sequential reference search (issue 24).

The searcher overlaps its two lists, fetches only the columns a ranking needs and reads the
shown hits' other columns afterwards; `reference_search` below does none of that. It is the
searcher as it was before those changes, written out step by step on the dataset's own
primitives (`Dataset.nearest`, `Dataset.matching`, every column of a hit in each list):
embed the questions in one batch, search each list in turn, re-score the first vector
candidates across scripts, fuse, keep one hit per document, cut to k. Both run on the small
corpus ingested with the default (dual, cross-script re-scoring) model, English and Chinese
questions, every mode, with filters, per_doc and min_score; the hits must agree in every
field, scores within 1e-6. The searcher runs twice: as a single question uses it, and as the
service and batches do, ranking its vector lists from the chunks it keeps in memory
(tasks/search/kept_chunks.py; scores within 1e-5 there, see the test).
"""

from __future__ import annotations

import numpy as np
import pytest

from tasks.dataset.dataset import Dataset
from tasks.dataset.schema import ROUTED_VECTOR_COLUMN, SEARCH_TEXT_COLUMN, VECTOR_COLUMN
from tasks.embed.base import CrossScriptRescorer, RoutedQuestions, model_input
from tasks.embed.models import model_info, model_spec_for
from tasks.search.filters import chunk_filter
from tasks.search.fusion import best_per_doc, term_coverage
from tasks.search.hits import HIT_COLUMNS, Hit
from tasks.search.params import MODES, SearchParams
from tasks.search.question import ask
from tasks.search.ranking import PER_DOC_OVERFETCH
from tasks.search.searcher import Searcher
from tasks.text import analysis

pytestmark = pytest.mark.integration  # the small corpus, ingested by the real flow

QUESTIONS = [
    "What does it mean that a value is moved in Rust?",
    "How do I insert a value into a hash map?",
    "How do I create a virtual environment with venv?",
    "如何查找一个文件属于哪个软件包？",
    "Rust 的所有权规则是什么？",  # a Chinese question about English chunks: re-scored
    "apt-file 如何搜索 package contents",  # mixed scripts
    "R FAQ",
]
OPTIONS = [
    {},
    {"k": 10},
    {"k": 3, "per_doc": True},
    {"k": 8, "min_score": 0.3},
    {"k": 5, "source": "rust-book/*"},
    {"k": 4, "per_doc": True, "min_score": 0.2},
]


def reference_search(searcher: Searcher, texts: list[str], params: SearchParams) -> list[list[Hit]]:
    """The hits for each text, found the plain way (see the module doc)."""
    dataset = searcher.dataset
    mode = searcher.resolve_mode(params.mode)
    where = chunk_filter(params)
    embedder = searcher.embedder()
    vectors = list(embedder.encode(texts)) if mode != "fts" else [None] * len(texts)
    results = []
    for text, vector in zip(texts, vectors, strict=True):
        limit = params.k * PER_DOC_OVERFETCH if params.per_doc else params.k
        while True:
            hits = ranked(searcher, dataset, text, vector, mode, where, limit, params.min_score)
            if not params.per_doc or len(best_per_doc(hits)) >= params.k or len(hits) < limit:
                break
            limit *= 4
        results.append((best_per_doc(hits) if params.per_doc else hits)[: params.k])
    return results


def ranked(
    searcher: Searcher,
    dataset: Dataset,
    text: str,
    vector: np.ndarray | None,
    mode: str,
    where: str | None,
    limit: int,
    floor: float | None,
) -> list[Hit]:
    if mode == "fts":
        rows = dataset.matching(text, HIT_COLUMNS, where, limit)
        return above([Hit.from_row(row, row["_score"]) for row in rows], floor)
    assert vector is not None
    if mode == "vector":
        return by_vector(searcher, dataset, text, vector, where, limit, floor)[:limit]
    fusion = searcher.fusion()
    depth = max(limit, fusion.depth)
    question = ask(text, dataset.vocabulary() if fusion.translated_weight else None)
    vector_hits = by_vector(searcher, dataset, text, vector, where, depth, floor)
    columns = [*HIT_COLUMNS, VECTOR_COLUMN, SEARCH_TEXT_COLUMN]
    rows = dataset.matching(text, columns, where, depth)
    translated = dataset.matching(dict(question.translations), columns, where, depth)
    if floor is not None:
        rows = [row for row in rows if float(np.dot(row[VECTOR_COLUMN], vector)) >= floor]
        translated = [r for r in translated if float(np.dot(r[VECTOR_COLUMN], vector)) >= floor]
    text_hits = [Hit.from_row(row, row["_score"]) for row in rows]
    translated_hits = [Hit.from_row(row, row["_score"]) for row in translated]
    coverage = 1.0
    if fusion.full_coverage is not None:
        terms = [row[SEARCH_TEXT_COLUMN] for row in rows]
        coverage = term_coverage(analysis.query_text(text).split(), terms)
    return fusion.fuse(question, vector_hits, text_hits, limit, coverage, translated_hits)


def by_vector(
    searcher: Searcher,
    dataset: Dataset,
    text: str,
    vector: np.ndarray,
    where: str | None,
    limit: int,
    floor: float | None,
) -> list[Hit]:
    rescorer = searcher.embedder()
    router = routing(searcher)
    depth = (
        max(limit, rescorer.rescore_depth) if isinstance(rescorer, CrossScriptRescorer) else limit
    )
    rows = dataset.nearest(vector, HIT_COLUMNS, where, depth)
    hits = [Hit.from_row(row, 1.0 - row["_distance"]) for row in rows]
    if router is not None:  # the routed chunks are ranked by the routed model instead
        headings = model_info(model_spec_for(dataset.fingerprint.model)).headings
        hits = [h for h in hits if not router.routes(model_input(h.text, h.section, headings))]
    hits = above(hits, floor)
    if isinstance(rescorer, CrossScriptRescorer):
        head = hits[: rescorer.rescore_depth]
        bonus = rescorer.cross_script_bonus(text, [hit.text for hit in head])
        head = [
            hit.rescored(hit.score + float(extra)) if extra else hit
            for hit, extra in zip(head, bonus, strict=True)
        ]
        hits = sorted(head + hits[len(head) :], key=lambda hit: -hit.score)
    if router is None:
        return hits
    asked = router.encode_routed([text])[0]
    rows = dataset.nearest(asked, HIT_COLUMNS, where, max(limit, 50), ROUTED_VECTOR_COLUMN)
    cosines = np.array([Hit.from_row(row, 1.0 - row["_distance"]).score for row in rows])
    spread = cosines.std() if len(rows) else 0.0
    z = (cosines - cosines.mean()) / spread if spread else 0.0 * cosines
    routed = [
        Hit.from_row(row, router.routed_score(float(score)))
        for row, score in zip(rows, z, strict=True)
    ][:limit]
    return sorted(hits + above(routed, floor), key=lambda hit: -hit.score)


def routing(searcher: Searcher) -> RoutedQuestions | None:
    """The question encoder where it routes the chunks of languages the dataset holds."""
    embedder, vocabulary = searcher.embedder(), searcher.dataset.vocabulary()
    if not isinstance(embedder, RoutedQuestions) or vocabulary is None:
        return None
    routes = searcher.dataset.fingerprint.routed_dimension
    return embedder if routes and vocabulary.languages & embedder.routed_languages else None


def above(hits: list[Hit], floor: float | None) -> list[Hit]:
    return hits if floor is None else [hit for hit in hits if hit.score >= floor]


def assert_same_hits(found: list[Hit], expected: list[Hit], tolerance: float = 1e-6) -> None:
    assert [hit.chunk_id for hit in found] == [hit.chunk_id for hit in expected]
    for got, want in zip(found, expected, strict=True):
        assert got.score == pytest.approx(want.score, abs=tolerance), got.chunk_id
        assert {**vars(got), "score": 0} == {**vars(want), "score": 0}


@pytest.fixture(scope="module", params=[False, True], ids=["lancedb-vectors", "kept-vectors"])
def searcher(small_index, request) -> Searcher:
    """The searcher as a single question uses it, and as the service and batches use it: its
    vector lists ranked from the vectors it keeps in memory."""
    searcher = Searcher(Dataset(small_index.uri), keep_vectors=request.param)
    kept = searcher.kept_chunks()
    assert (kept is not None and kept.kept) == request.param
    return searcher


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("options", OPTIONS, ids=lambda options: str(options) or "defaults")
def test_hits_equal_the_plain_sequential_search(searcher, mode, options):
    params = SearchParams(mode=mode, **options)
    expected = reference_search(searcher, QUESTIONS, params)
    assert any(expected), "the questions find something"
    # Kept vectors give the cosine as a float32 dot product, LanceDB as 1 - its float32
    # cosine distance: they differ by float32 rounding (up to about 1e-6 here), which
    # hybrid's standardised scores scale up.
    tolerance = 1e-5 if searcher.kept_chunks() else 1e-6
    for question in QUESTIONS:
        # one at a time, as the service asks (the question's vector encoded alone)
        found = searcher.search(question, params)
        assert_same_hits(found, reference_search(searcher, [question], params)[0], tolerance)
    for got, want in zip(searcher.search_many(QUESTIONS, params), expected, strict=True):
        assert_same_hits(got, want, tolerance)


def test_the_reference_sees_cross_script_rescoring_and_both_lists(searcher):
    """The comparison covers what the optimised path changes: hybrid hits found by each list
    and by both, and vector scores raised by the cross-script bonus."""
    params = SearchParams(k=30, mode="hybrid")
    found_by = {
        hit.found_by for hits in reference_search(searcher, QUESTIONS, params) for hit in hits
    }
    assert found_by == {"vector", "text", "both"}
    chinese = "Rust 的所有权规则是什么？"
    plain = searcher.dataset.nearest(
        searcher.embedder().encode([chinese])[0], ["chunk_id"], None, 20
    )
    rescored = reference_search(searcher, [chinese], SearchParams(k=20, mode="vector"))[0]
    cosine = {row["chunk_id"]: 1.0 - row["_distance"] for row in plain}
    assert any(hit.score > cosine[hit.chunk_id] + 1e-3 for hit in rescored)


@pytest.mark.parametrize("mode", [None, "vector"])
def test_a_batch_of_several_blocks_equals_its_questions_one_at_a_time(searcher, mode):
    """A batch longer than two blocks of LISTS_AHEAD (its vector lists made a block at a
    time, in one product where the searcher keeps the chunks) gives each question the hits
    it gets alone."""
    from tasks.search.batch import LISTS_AHEAD

    questions = (QUESTIONS * (2 * LISTS_AHEAD // len(QUESTIONS) + 2))[: 2 * LISTS_AHEAD + 3]
    params = SearchParams(k=5, mode=mode)
    # A question's vector made in a batch differs from the one made alone by about 1e-7,
    # which hybrid's standardised scores scale up.
    tolerance = 1e-5
    alone = {question: searcher.search(question, params) for question in QUESTIONS}
    for question, hits in zip(questions, searcher.search_many(questions, params), strict=True):
        assert_same_hits(hits, alone[question], tolerance)
