"""Search modes, filters, output, batch mode and index info of the query flow.

Unit tests run on synthetic rows with the hash embedder; the integration tests ingest a tiny
corpus with the real model and go through the real flow and command line.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatchcase

import lancedb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from flows.ingest import ingest
from flows.query import main
from flows.query_flow import query
from tasks.core.records import Block, Document, SourceFile
from tasks.dataset.ann import refresh_vector_index, vector_index
from tasks.dataset.dataset import Dataset
from tasks.dataset.schema import CHUNKS_TABLE, Fingerprint, chunks_schema
from tasks.embed.hash_backend import HashEmbedder
from tasks.embed.models import DEFAULT_MODEL, model_info
from tasks.parse.formats import TYPES
from tasks.search.fusion import (
    ENGLISH_FUSION,
    MULTILINGUAL_FUSION,
    Fusion,
    best_per_doc,
    fusion_for,
    standardised,
    term_coverage,
)
from tasks.search.hits import Hit
from tasks.search.info import language_shares
from tasks.search.params import MODES, SearchParams
from tasks.search.question import ask
from tasks.search.searcher import Searcher
from tasks.search.snippet import snippet
from tasks.text.split import SplitSettings, split_document

from .conftest import ROOT
from .cross_encoder import build_tiny_cross_encoder

EMBEDDER = HashEmbedder(16)
SPLIT = SplitSettings(chunk_size=200, chunk_overlap=20)
FP = Fingerprint.of(EMBEDDER.info, SPLIT)
DAY0 = datetime(2024, 1, 1, tzinfo=UTC)


def document(doc_id: str, blocks: list[tuple[str, str]], day: int = 0) -> Document:
    """A document of (section, text) blocks, modified `day` days after DAY0."""
    mime = TYPES[doc_id.rsplit(".", 1)[1]]
    mtime_us = int((DAY0 + timedelta(days=day)).timestamp() * 1_000_000)
    source = SourceFile(doc_id, f"/corpus/{doc_id}", 10, mtime_us, f"h-{doc_id}", mime)
    return Document(source, doc_id, tuple(Block(text, section, 1) for section, text in blocks))


def build_index(uri: str, documents: list[Document]) -> Dataset:
    """Write the documents with the hash embedder and run the ingest flow's upkeep step."""
    dataset = Dataset(uri)
    dataset.prepare(FP)
    chunks = [c for d in documents for c in split_document(d, SPLIT).chunks]
    dataset.write_batch(documents, chunks, EMBEDDER.encode([c.text for c in chunks]))
    dataset.finalize("run-test")
    return dataset


# Every filter gets quotes, backslashes, LIKE wildcards, SQL comments and non-ASCII.
AWKWARD_IDS = [
    "it's.md",
    "100%_done.html",
    "back\\slash.pdf",
    "' OR 1=1 --.txt",
    "中文 文档.md",
    "plain.md",
    "Ärger/ümlaut.html",
]
AWKWARD_SECTIONS = [
    "It's > Quotes",
    "100% > _under_",
    "Back\\slash",
    "' OR 1=1 --",
    "中文 > 章节",
    "Plain",
    "ÄRGER > Straße Σ",
]
AWKWARD_DOCS = [
    document(
        doc_id,
        [
            (AWKWARD_SECTIONS[i], f"common words of {doc_id}"),
            (AWKWARD_SECTIONS[(i + 1) % 7], f"common text in {doc_id}"),
        ],
        day=10 * i,
    )
    for i, doc_id in enumerate(AWKWARD_IDS)
]
ALPHABET = "*?%_'\\ -=.ab中Äß"
DAYS = [DAY0 + timedelta(days=d) for d in (-1, 0, 5, 10, 25, 30, 60, 61, 100)]


@pytest.fixture(scope="module")
def awkward(tmp_path_factory):
    uri = str(tmp_path_factory.mktemp("awkward") / "index")
    dataset = build_index(uri, AWKWARD_DOCS)
    rows = lancedb.connect(uri).open_table(CHUNKS_TABLE).to_arrow().to_pylist()
    return Searcher(dataset), rows


def python_side(rows: list[dict], params: SearchParams) -> set[str]:
    """The chunk ids that the filters in `params` keep, decided in plain Python."""
    mtime = {d.doc_id: datetime.fromtimestamp(d.source.mtime_us / 1e6, UTC) for d in AWKWARD_DOCS}
    return {
        row["chunk_id"]
        for row in rows
        if (
            params.source is None
            or fnmatchcase(row["doc_id"], params.source)
            or fnmatchcase(row["source_path"], params.source)
        )
        and (params.type is None or row["mime_type"] == TYPES[params.type])
        and (params.section is None or params.section.lower() in row["section"].lower())
        and (params.since is None or mtime[row["doc_id"]] >= params.since)
        and (params.until is None or mtime[row["doc_id"]] < params.until)
    }


awkward_text = st.text(alphabet=ALPHABET, max_size=6)


@settings(max_examples=150, deadline=None)
@given(
    mode=st.sampled_from(MODES),
    source=st.one_of(
        st.none(),
        st.sampled_from(["*", "*.md", "it's*", "100%_*", "*\\*", "' OR 1=1 --*", "中文*", "*/*"]),
        awkward_text,
    ),
    type=st.one_of(st.none(), st.sampled_from(sorted(TYPES))),
    section=st.one_of(
        st.none(),
        st.sampled_from(["it's", "100%", "_under_", "\\", "' or 1=1 --", "章节", "straße σ"]),
        awkward_text,
    ),
    since=st.one_of(st.none(), st.sampled_from(DAYS)),
    until=st.one_of(st.none(), st.sampled_from(DAYS)),
)
def test_filters_keep_exactly_what_a_python_filter_keeps(
    awkward, mode, source, type, section, since, until
):
    assume(since is None or until is None or since < until)
    searcher, rows = awkward
    params = SearchParams(
        k=100, mode=mode, source=source, type=type, section=section, since=since, until=until
    )
    hits = searcher.search("common", params)
    assert {hit.chunk_id for hit in hits} == python_side(rows, params)


@pytest.mark.parametrize("text", ["it's", "' OR 1=1 --", 'a "b', "100%_\\", "中文 文档", "(", "*"])
def test_awkward_query_texts_search_without_errors(awkward, text):
    searcher, _ = awkward
    for mode in MODES:
        assert len(searcher.search(text, SearchParams(k=3, mode=mode))) <= 3


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"k": 0}, "k\n.*greater than or equal to 1"),
        ({"k": 10_000}, "k\n.*less than or equal to 1000"),
        ({"mode": "' OR 1=1 --"}, "mode\n.*Input should be 'vector', 'fts' or 'hybrid'"),
        ({"type": "md' OR 1=1 --"}, "type\n.*must be one of md, markdown"),
        ({"since": "' OR 1=1 --"}, "since\n.*not a date, date-time or age"),
        ({"since": "2024-02-01", "until": "2024-01-01"}, "since must be earlier"),
        ({"min_score": float("nan")}, "min_score\n.*must be a finite number"),
    ],
)
def test_invalid_options_are_refused_before_any_sql(options, message):
    with pytest.raises(ValidationError, match=message):
        SearchParams(**options)


def test_times_parse_as_utc_dates_or_ages():
    assert SearchParams(since="2024-05-01").since == datetime(2024, 5, 1, tzinfo=UTC)
    local = SearchParams(until="2024-05-01T12:00+02:00").until
    assert local == datetime(2024, 5, 1, 10, tzinfo=UTC)
    before = datetime.now(UTC)
    since = SearchParams(since="7d").since
    assert before - timedelta(days=7) <= since <= datetime.now(UTC) - timedelta(days=7)


def test_scores_per_mode_and_min_score(awkward):
    searcher, rows = awkward
    vector = searcher.search("common words", SearchParams(k=100, mode="vector"))
    query_vector = EMBEDDER.encode(["common words"])[0]
    by_id = {row["chunk_id"]: np.dot(row["vector"], query_vector) for row in rows}
    assert all(abs(hit.score - by_id[hit.chunk_id]) < 1e-5 for hit in vector)
    cut = next(i for i in range(1, len(vector)) if vector[i - 1].score > vector[i].score)
    floor = (vector[cut - 1].score + vector[cut].score) / 2
    above = searcher.search("common words", SearchParams(k=100, mode="vector", min_score=floor))
    assert [hit.chunk_id for hit in above] == [hit.chunk_id for hit in vector[:cut]]
    hybrid = searcher.search("common words", SearchParams(k=100, mode="hybrid", min_score=floor))
    assert {hit.chunk_id for hit in hybrid} <= {hit.chunk_id for hit in above}
    assert [hit.score for hit in hybrid] == sorted((hit.score for hit in hybrid), reverse=True)
    fts = searcher.search("words", SearchParams(k=100, mode="fts"))
    assert fts and all("words" in hit.text for hit in fts)
    assert fts[0].score >= fts[-1].score > 0


def hit(chunk_id: str, score: float) -> Hit:
    return Hit(chunk_id, f"{chunk_id}.md", f"/{chunk_id}.md", "", "", None, 0, 1, score, "", 0, 0)


def test_hybrid_fusion_weighs_standardised_scores():
    by_vector = [hit("a", 0.9), hit("b", 0.5), hit("c", 0.4)]
    by_text = [hit("c", 20.0), hit("a", 2.0)]
    assert standardised(by_text) == {"c": 1.0, "a": -1.0}
    assert standardised([hit("x", 3.0), hit("y", 3.0)]) == {"x": 0.0, "y": 0.0}
    even = Fusion(vector_weight=0.5, cjk_vector_weight=0.0)
    # z(vector): a 1.39, b -0.46, c -0.93; z(text): c 1, a -1, b missing: the lowest, -1.
    fused = even.fuse(ask("which one"), by_vector, by_text, limit=3)
    assert [h.chunk_id for h in fused] == ["a", "c", "b"]
    assert fused[0].score == round(0.5 * standardised(by_vector)["a"] - 0.5, 6)
    # A Chinese question: the text list alone decides.
    assert [h.chunk_id for h in even.fuse(ask("哪一个"), by_vector, by_text, limit=2)] == ["c", "a"]
    assert (
        ENGLISH_FUSION.weight_for(ask("黑豹队的防守丢了多少分？"))
        == ENGLISH_FUSION.cjk_vector_weight
    )
    assert ENGLISH_FUSION.weight_for(ask("How many points? 多少")) == ENGLISH_FUSION.vector_weight


def test_a_weak_full_text_list_does_not_drown_a_good_vector_list():
    """Multilingual datasets: the full-text list weighs in proportion to the share of the
    question's terms its best hits hold, below half of them; English-only ones as before."""
    assert term_coverage(["rust", "引用", "可变"], ["rust borrow", "rust own"]) == 1 / 3
    assert term_coverage(["rust", "引用"], ["引用 rust", "x"]) == 1.0
    assert term_coverage([], ["a"]) == 0.0 and term_coverage(["a"], []) == 0.0
    assert term_coverage(["z"], ["a"] * 10 + ["z"]) == 0.0, "only the best 10 hits count"
    multilingual = MULTILINGUAL_FUSION
    assert fusion_for(True) is multilingual and fusion_for(False) is ENGLISH_FUSION
    full = 1 - multilingual.weight_for(ask("How do I borrow?"))
    assert multilingual.text_weight(ask("How do I borrow?"), 1.0) == full
    assert multilingual.text_weight(ask("How do I borrow?"), 0.5) == full
    assert multilingual.text_weight(ask("How do I borrow?"), 0.25) == pytest.approx(full / 2)
    assert multilingual.text_weight(ask("How do I borrow?"), 0.1) == pytest.approx(full / 5)
    assert multilingual.text_weight(ask("How do I borrow?"), 0.09) == 0.0, "under a tenth: none"
    assert multilingual.text_weight(ask("How do I borrow?"), 0.0) == 0.0
    assert ENGLISH_FUSION.text_weight(ask("How do I borrow?"), 0.0) == 0.5, (
        "English-only: unchanged"
    )
    # A Chinese question over English chunks: the vector list has the answer ("a"); the text
    # list matched one stray word of the question in "x", "y" and "z".
    by_vector = [hit("a", 0.5), hit("b", 0.45), hit("x", 0.3), hit("c", 0.2)]
    by_text = [hit("x", 9.0), hit("y", 1.0), hit("z", 0.5)]
    question = ask("能否同时对同一个值拥有两个可变引用 Rust？")
    weak = multilingual.fuse(question, by_vector, by_text, limit=3, coverage=0.1)
    assert weak[0].chunk_id == "a", "the good vector list leads"
    ungated = multilingual.fuse(question, by_vector, by_text, limit=3, coverage=1.0)
    assert ungated[0].chunk_id == "x", "at full weight the stray match would have won"
    alone = multilingual.fuse(question, by_vector, [], 3, 0.0)
    assert [h.chunk_id for h in alone] == ["a", "b", "x"], "no full-text list: the vectors'"
    stray = multilingual.fuse(question, by_vector, by_text, limit=4, coverage=0.09)
    assert [h.chunk_id for h in stray] == ["a", "b", "x", "c"], "a stray word: the vectors'"


@pytest.mark.parametrize("fusion", [ENGLISH_FUSION, MULTILINGUAL_FUSION], ids=["en", "multi"])
@pytest.mark.parametrize("text", ["Which one?", "哪一个？"])
def test_hybrid_is_its_one_list_where_the_other_is_empty(fusion, text):
    """Where one list found nothing, hybrid mode ranks as the other list does: the default
    mode is never below its better list there."""
    question = ask(text)
    by_vector = [hit("a", 0.9), hit("b", 0.7), hit("c", 0.69), hit("d", 0.1)]
    by_text = [hit("d", 12.0), hit("c", 3.0), hit("a", 2.5)]
    for only in (by_vector, by_text):
        vector, words = (only, []) if only is by_vector else ([], only)
        for coverage in (0.0, 0.3, 1.0):
            fused = fusion.fuse(question, vector, words, limit=10, coverage=coverage)
            assert [h.chunk_id for h in fused] == [h.chunk_id for h in only], (only, coverage)
    for coverage in (0.0, 1.0):  # the translated list alone keeps its order too
        fused = fusion.fuse(question, [], [], 10, coverage, by_translation=by_text)
        assert [h.chunk_id for h in fused] == [h.chunk_id for h in by_text]


def test_fused_hits_say_which_list_found_them():
    by_vector = [hit("a", 0.9), hit("b", 0.5), hit("c", 0.4)]
    by_text = [hit("c", 20.0), hit("a", 2.0), hit("d", 1.0)]
    fused = ENGLISH_FUSION.fuse(ask("which one"), by_vector, by_text, limit=4)
    found = {h.chunk_id: h.found_by for h in fused}
    assert found == {"a": "both", "b": "vector", "c": "both", "d": "text"}
    assert fused[0].rescored(1.0).found_by == fused[0].found_by
    assert {h.found_by for h in ENGLISH_FUSION.fuse(ask("x"), by_vector, [], limit=3)} == {"vector"}
    assert {h.found_by for h in ENGLISH_FUSION.fuse(ask("x"), [], by_text, limit=3)} == {"text"}
    assert all(h.found_by is None for h in by_vector)  # outside hybrid mode: not set


def test_hybrid_search_marks_each_hit_with_the_lists_that_found_it(tmp_path):
    """Fillers are found by their vectors only; zebra chunks by their words, and by their
    vectors too when those are among the nearest (ENGLISH_FUSION.depth) chunks."""
    fillers = [(f"Part {i}", f"filler {i} says nothing much") for i in range(55)]
    zebras = [
        (f"Zebra {i}", f"zebra {' '.join(f'word{i}x{j}' for j in range(12))}") for i in range(8)
    ]
    dataset = build_index(str(tmp_path / "index"), [document("many.md", fillers + zebras)])
    searcher = Searcher(dataset)
    depth = ENGLISH_FUSION.depth
    by_vector = {h.chunk_id for h in searcher.search("zebra", SearchParams(k=depth, mode="vector"))}
    by_text = {h.chunk_id for h in searcher.search("zebra", SearchParams(k=depth, mode="fts"))}
    hybrid = searcher.search("zebra", SearchParams(k=depth, mode="hybrid"))
    expected = {chunk_id: "both" if chunk_id in by_text else "vector" for chunk_id in by_vector} | {
        chunk_id: "text" for chunk_id in by_text - by_vector
    }
    assert {h.chunk_id: h.found_by for h in hybrid} == {
        h.chunk_id: expected[h.chunk_id] for h in hybrid
    }
    assert {h.found_by for h in hybrid} == {"vector", "text", "both"}
    per_doc = searcher.search("zebra", SearchParams(k=1, mode="hybrid", per_doc=True))
    assert per_doc[0].found_by == hybrid[0].found_by != "vector"


def test_stats_name_the_share_of_chunks_per_language(tmp_path, capsys):
    english = [
        (f"Part {i}", f"Ownership rules, part {i}: each value has one owner.") for i in range(3)
    ]
    chinese = [("安装", "使用 apt-get 安装软件包。"), ("配置", "编辑配置文件，然后重新启动服务。")]
    uri = str(tmp_path / "index")
    dataset = build_index(uri, [document("en.md", english), document("zh.md", chinese)])
    assert main(["--stats", "--json", "--index", uri]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["chunks"] == 5 and stats["languages_sampled_chunks"] == 5
    assert stats["languages"] == {"latin": 0.6, "chinese": 0.4}
    assert main(["--stats", "--index", uri]) == 0
    assert "\nlanguages: latin 60%, chinese 40%\n" in capsys.readouterr().out
    # Above the sample size, every k-th chunk of the scan is read: the same ones every time.
    sampled = language_shares(dataset.chunks, 5, sample=2)
    assert sampled[1] == 2 and sampled == language_shares(dataset.chunks, 5, sample=2)
    assert language_shares(dataset.chunks, 5, sample=5) == (stats["languages"], 5)


def test_per_doc_fetches_more_until_k_documents_show(tmp_path):
    uri = str(tmp_path / "index")
    many = [(f"Part {i}", f"alpha beta gamma part {i}") for i in range(30)]
    dataset = build_index(
        uri, [document("long.md", many), document("short.md", [("Top", "alpha delta")])]
    )
    searcher = Searcher(dataset)
    plain = searcher.search("alpha beta gamma", SearchParams(k=10, mode="vector"))
    assert {hit.doc_id for hit in plain} == {"long.md"}
    for mode in MODES:
        best = searcher.search("alpha beta gamma", SearchParams(k=2, mode=mode, per_doc=True))
        assert [hit.doc_id for hit in best] == ["long.md", "short.md"]
    assert best_per_doc(plain) == plain[:1]


def write_new_document(uri: str) -> list:
    """Commit "new.md" ("zebra crossing zebra") to the dataset at `uri` as a second run
    would, finalize included; its chunks."""
    writer = Dataset(uri)
    writer.write_batch(
        [new := document("new.md", [("New", "zebra crossing zebra")])],
        chunks := split_document(new, SPLIT).chunks,
        EMBEDDER.encode([chunk.text for chunk in chunks]),
    )
    writer.finalize("run-test-2")
    return chunks


@pytest.mark.parametrize("keep_vectors", [False, True], ids=["lancedb-vectors", "kept-vectors"])
def test_a_searcher_that_follows_writers_sees_each_new_version(tmp_path, keep_vectors):
    """A warm searcher on a dataset opened with a consistency interval (as the service opens
    it) finds rows committed after its first searches, in every mode, and loses deleted
    ones; one opened without keeps the version it first read. Also where the searcher keeps
    the vectors in memory (as the service does): it reads them again for each version."""
    uri = str(tmp_path / "index")
    build_index(uri, [document("old.md", [("Old", "alpha beta gamma")])])
    following = Searcher(Dataset(uri, consistency=timedelta(0)), keep_vectors=keep_vectors)
    pinned = Searcher(Dataset(uri), keep_vectors=keep_vectors)
    for searcher in (following, pinned):
        for mode in MODES:
            hits = searcher.search("zebra crossing", SearchParams(k=5, mode=mode))
            assert "new.md" not in {hit.doc_id for hit in hits}
    write_new_document(uri)
    if keep_vectors:
        kept = following.kept_chunks()
        assert kept is not None and kept.kept and kept.columns.num_rows == 2
    for mode in MODES:
        hits = following.search("zebra crossing", SearchParams(k=5, mode=mode))
        assert hits[0].doc_id == "new.md", mode
        assert "new.md" not in {h.doc_id for h in pinned.search("zebra", SearchParams(mode=mode))}
    Dataset(uri).delete(["new.md"])
    for mode in MODES:
        hits = following.search("zebra crossing", SearchParams(k=5, mode=mode))
        assert "new.md" not in {hit.doc_id for hit in hits}, mode


def test_snippet_shows_the_best_matching_part():
    text = "filler words here. " * 40 + "The zebra package installs on Linux. " + "more. " * 60
    shown = snippet(text, "install the zebra package", width=120)
    assert "zebra package" in shown and shown.startswith("… ") and shown.endswith(" …")
    assert len(shown) <= 124
    assert snippet("short text", "anything") == "short text"
    chinese = "无关的内容。" * 60 + "软件包管理工具" + "其他内容。" * 60
    assert "软件包管理" in snippet(chinese, "什么是软件包管理", width=60)


@settings(max_examples=200, deadline=None)
@given(
    words=st.lists(st.text(alphabet="abcdefghijk’.", min_size=1, max_size=12), min_size=30),
    width=st.integers(40, 120),
    pick=st.integers(0, 29),
)
def test_snippets_start_and_end_at_word_boundaries(words, width, pick):
    text = " ".join(words)
    shown = snippet(text, words[pick], width=width).removeprefix("… ").removesuffix(" …")
    assert shown in text and len(shown) <= width
    start = text.index(shown)
    assert start == 0 or text[start - 1] == " ", "no word cut at the start"
    end = start + len(shown)
    assert end == len(text) or text[end] == " ", "no word cut at the end"


def test_vector_index_keeps_recall_and_filtered_results(tmp_path):
    uri = str(tmp_path / "index")
    dataset = Dataset(uri)
    dataset.prepare(FP)
    table = lancedb.connect(uri).open_table(CHUNKS_TABLE)
    rng = np.random.default_rng(7)
    table.add(synthetic_rows(rng, 3000))
    assert refresh_vector_index(table, min_rows=1000)
    assert vector_index(table) is not None
    assert not refresh_vector_index(table, min_rows=1000), "not retrained before doubling"
    searcher = Searcher(Dataset(uri))
    found = 0
    for probe in clustered(rng, 30):
        approximate = searcher.nearest(probe, None, 10)
        exact = searcher.dataset.chunks.search(probe).distance_type("cosine")
        exact = exact.bypass_vector_index()
        exact = exact.limit(10).to_list()
        exact_scores = {row["chunk_id"]: 1 - row["_distance"] for row in exact}
        shared = [hit for hit in approximate if hit.chunk_id in exact_scores]
        found += len(shared)
        assert all(abs(hit.score - exact_scores[hit.chunk_id]) < 1e-5 for hit in shared)
    assert found / 300 >= 0.95
    # A prefilter matching 3 rows still returns all 3 (the exact scan steps in if needed).
    hits = searcher.nearest(clustered(rng, 1)[0], "doc_id = 'doc-0007.md'", 10)
    assert sorted(hit.chunk_index for hit in hits) == [0, 1, 2]
    table.add(synthetic_rows(rng, 3000, start=3000))
    assert refresh_vector_index(table, min_rows=1000), "retrained once the table doubled"
    assert [i.name for i in table.list_indices() if "vector" in i.columns] == ["vector_ivfsq_6000"]


def synthetic_rows(rng: np.random.Generator, n: int, start: int = 0) -> pa.Table:
    """Rows of the chunks schema with clustered unit vectors, 3 chunks per document."""
    vectors = clustered(rng, n)
    return pa.Table.from_pylist(
        [
            {
                "chunk_id": f"doc-{i // 3:04d}.md:chunk:{i % 3:04d}",
                "doc_id": f"doc-{i // 3:04d}.md",
                "source_path": f"/corpus/doc-{i // 3:04d}.md",
                "mime_type": "text/markdown",
                "title": "",
                "section": "",
                "chunk_index": i % 3,
                "chunk_count": 3,
                "text": f"row {i}",
                "vector": vectors[i - start].tolist(),
            }
            for i in range(start, start + n)
        ],
        schema=chunks_schema(FP),
    )


_CENTRES = np.random.default_rng(0).standard_normal((40, 16)).astype(np.float32)


def clustered(rng: np.random.Generator, n: int) -> np.ndarray:
    points = _CENTRES[rng.integers(0, len(_CENTRES), n)] + 0.6 * rng.standard_normal((n, 16))
    return (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)


# Integration: a tiny corpus ingested with the real model, searched through the real flow.

CORPUS = {
    "guide/install.md": "# Install\n\n## Linux\n\nUse apt-get to install the zebra package on "
    "Debian.\n\n## Windows\n\nRun the installer wizard, then reboot the machine.\n",
    "notes/cooking.txt": "Bake the sourdough bread at 230 degrees for forty minutes.\n",
    "web/astronomy.html": "<html><head><title>Stars</title></head><body><h1>Stars</h1>"
    "<h2>Neutron stars</h2><p>A neutron star is the collapsed core of a massive star.</p>"
    "</body></html>",
    "guide/archive.md": "# Archive\n\nZebra stripes confuse the biting flies.\n",
}
OLD = datetime(2020, 6, 1, tzinfo=UTC)  # guide/archive.md's modification time


@pytest.fixture(scope="module")
def real_index(prefect_backend, tmp_path_factory):
    root = tmp_path_factory.mktemp("query")
    for name, text in CORPUS.items():
        path = root / "corpus" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, "utf-8")
    os.utime(root / "corpus" / "guide/archive.md", (OLD.timestamp(), OLD.timestamp()))
    uri = str(root / "index")
    summary = ingest(source_dir=str(root / "corpus"), index_uri=uri)
    assert summary.indexed == len(CORPUS) and not summary.failed
    return uri


QUESTION = "How do I install the zebra package on Linux?"


@pytest.mark.integration
@pytest.mark.parametrize("mode", [*MODES, None])
def test_every_mode_finds_the_answering_section(real_index, mode):
    hits = query(text=QUESTION, index_uri=real_index, k=3, mode=mode)
    assert hits[0].doc_id == "guide/install.md" and hits[0].section == "Install > Linux"
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)
    if mode == "vector":
        assert 0.3 < hits[0].score <= 1.0


@pytest.mark.integration
@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"type": "txt"}, {"notes/cooking.txt"}),
        ({"source": "guide/*"}, {"guide/install.md", "guide/archive.md"}),
        ({"section": "WINDOWS"}, {"guide/install.md"}),
        ({"until": "2021-01-01"}, {"guide/archive.md"}),
        ({"since": "2021-01-01", "type": "md"}, {"guide/install.md"}),
        ({"source": "*.html", "section": "neutron"}, {"web/astronomy.html"}),
    ],
)
def test_filters_through_the_flow(real_index, options, expected):
    hits = query(text="zebra", index_uri=real_index, k=10, **options)
    assert {hit.doc_id for hit in hits} == expected


@pytest.mark.integration
def test_per_doc_and_min_score_through_the_flow(real_index):
    hits = query(text=QUESTION, index_uri=real_index, k=10, per_doc=True)
    assert len(hits) == len({hit.doc_id for hit in hits}) == len(CORPUS)
    assert query(text=QUESTION, index_uri=real_index, mode="vector", min_score=0.99) == []


@pytest.mark.integration
def test_the_flow_reranks_with_a_cross_encoder_on_disk(real_index, tmp_path):
    folder = str(build_tiny_cross_encoder(tmp_path / "tiny-ce"))
    first_stage = query(text=QUESTION, index_uri=real_index, k=4, mode="hybrid")
    hits = query(text=QUESTION, index_uri=real_index, k=4, rerank=folder, rerank_depth=4)
    from tasks.search.rerank import cross_encoder

    scores = cross_encoder(folder)([(QUESTION, hit.text) for hit in first_stage])
    order = sorted(range(len(first_stage)), key=lambda i: -scores[i])
    assert [hit.chunk_id for hit in hits] == [first_stage[i].chunk_id for i in order]
    assert [hit.score for hit in hits] == [round(scores[i], 6) for i in order]


@pytest.mark.integration
def test_cli_table_json_and_no_hits(real_index, capsys):
    assert main([QUESTION, "--index", real_index, "-k", "2"]) == 0
    table = capsys.readouterr().out
    assert "mode hybrid" in table and " 1. " in table and "guide/install.md" in table
    assert "§ Install > Linux" in table and "zebra package" in table
    assert re.search(r"^ 1\. -?\d+\.\d{4}  (vector|text  |both  )  guide/install\.md$", table, re.M)

    assert main([QUESTION, "--index", real_index, "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert hits and {hit["found_by"] for hit in hits} <= {"vector", "text", "both"}
    assert main([QUESTION, "--index", real_index, "--mode", "fts", "--json", "--per-doc"]) == 0
    hits = json.loads(capsys.readouterr().out)
    fields = {"chunk_id", "doc_id", "source_path", "section", "page_number", "chunk_index"}
    assert hits and all(fields | {"score", "text"} <= hit.keys() for hit in hits)
    assert all(hit["found_by"] is None for hit in hits)

    assert main([QUESTION, "--index", real_index, "--type", "pdf"]) == 0
    assert capsys.readouterr().out.strip() == "no matching chunks"


@pytest.mark.integration
def test_cli_errors_are_one_clear_line(real_index, tmp_path, capsys):
    assert main(["anything", "--index", str(tmp_path / "none")]) == 1
    assert capsys.readouterr().err.strip().startswith("error: no index at")
    assert main(["anything", "--index", real_index, "--model", "hash"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "built with model" in err and "\n" not in err
    for bad in (["--since", "last tuesday"], ["--mode", "best"], ["-k", "0"], ["--stats"]):
        with pytest.raises(SystemExit) as exit_:
            main(["anything", "--index", real_index, *bad])
        assert exit_.value.code == 2
    assert "cannot be combined" in capsys.readouterr().err


@pytest.mark.integration
def test_batch_mode_writes_one_line_per_query(real_index, tmp_path, capsys):
    queries = tmp_path / "q.jsonl"
    lines = [{"qid": "q1", "query": QUESTION}, {"qid": 2, "query": "neutron star core"}]
    queries.write_text("\n".join(json.dumps(line) for line in lines) + "\n", "utf-8")
    assert main(["--queries-file", str(queries), "--index", real_index, "-k", "1"]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(o["qid"], o["hits"][0]["doc_id"]) for o in out] == [
        ("q1", "guide/install.md"),
        ("2", "web/astronomy.html"),
    ]
    queries.write_text('{"qid": "q1"}\n', "utf-8")
    assert main(["--queries-file", str(queries), "--index", real_index]) == 1
    assert "line 1" in capsys.readouterr().err


@pytest.mark.integration
def test_stats_and_sources_describe_the_index(real_index, capsys):
    assert main(["--stats", "--json", "--index", real_index]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["documents_by_status"] == {"indexed": len(CORPUS)}
    assert stats["model"] == model_info(DEFAULT_MODEL).model_id  # the default backend
    assert stats["chunks"] >= len(CORPUS) and stats["size_bytes"] > 0
    assert stats["default_mode"] == "hybrid" and stats["run_tags"]
    assert {"FTS", "BTree"} <= {index["type"] for index in stats["indexes"]}
    assert main(["--sources", "--json", "--index", real_index]) == 0
    sources = json.loads(capsys.readouterr().out)
    assert [row["doc_id"] for row in sources] == sorted(CORPUS)
    assert all(row["status"] == "indexed" and row["n_chunks"] >= 1 for row in sources)
    assert main(["--stats", "--index", real_index]) == 0
    assert "default mode: hybrid" in capsys.readouterr().out


@pytest.mark.integration
def test_info_help_and_errors_do_not_load_the_model(real_index, tmp_path):
    script = (
        "import sys\n"
        "from flows.query import main\n"
        f"main(['--stats', '--index', {real_index!r}])\n"
        f"main(['--sources', '--index', {real_index!r}])\n"
        f"assert main(['x', '--index', {str(tmp_path / 'none')!r}]) == 1\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = {'torch', 'sentence_transformers', 'transformers'} & set(sys.modules)\n"
        "print('HEAVY', sorted(heavy))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "HEAVY []" in result.stdout


@pytest.mark.integration
def test_the_flow_can_publish_its_hits_as_an_artifact(real_index):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    query(text=QUESTION, index_uri=real_index, k=2, artifact=True)
    with get_client(sync_client=True) as client:
        key = ArtifactFilter(key=ArtifactFilterKey(any_=["query-hits"]))
        artifacts = client.read_artifacts(artifact_filter=key)
    assert artifacts and "guide/install.md" in json.dumps(artifacts[-1].data)


def test_a_table_too_large_to_keep_is_searched_by_lancedb(tmp_path, monkeypatch):
    """Past KEPT_VECTORS_MAX_BYTES a searcher keeps no copy and its vector lists are
    LanceDB's: the same hits as a searcher that keeps one."""
    from tasks.search import kept_chunks

    uri = str(tmp_path / "index")
    build_index(uri, [document("a.md", [("A", "alpha beta"), ("B", "zebra crossing")])])
    keeping = Searcher(Dataset(uri), keep_vectors=True)
    params = SearchParams(k=5, mode="vector")
    expected = keeping.search("zebra", params)
    assert keeping.kept_chunks().kept
    monkeypatch.setattr(kept_chunks, "KEPT_VECTORS_MAX_BYTES", 100)
    too_large = Searcher(Dataset(uri), keep_vectors=True)
    assert too_large.kept_chunks().kept is False
    found = too_large.search("zebra", params)
    assert [hit.chunk_id for hit in found] == [hit.chunk_id for hit in expected]
    assert [hit.score for hit in found] == pytest.approx([hit.score for hit in expected], abs=1e-5)


def test_a_full_text_row_newer_than_the_kept_copy_comes_from_lancedb(tmp_path):
    """The full-text list takes its rows from the kept copy by row id; a row committed after
    the copy was read (the search's scope holds the copy it started with) is not in it, so
    that list is LanceDB's rows: the new row shows, with its own columns."""
    from tasks.dataset.chunk_store import matching_row_ids
    from tasks.search import query_loop
    from tasks.search.sources import KeptSource

    uri = str(tmp_path / "index")
    build_index(uri, [document("old.md", [("Old", "alpha beta zebra")])])
    searcher = Searcher(Dataset(uri, consistency=timedelta(0)), keep_vectors=True)
    source = searcher._reading(None).source  # the copy of the first version
    assert isinstance(source, KeptSource) and source.kept.kept
    from_copy = query_loop.run(source.text_hits({"zebra": 1.0}, 5))
    assert [hit.doc_id for hit in from_copy] == ["old.md"]
    chunks = write_new_document(uri)
    ids, _ = query_loop.run(matching_row_ids(source.lance.table, {"zebra": 1.0}, 5))
    assert len(ids) == 2 and source.kept.positions(ids) is None
    found = query_loop.run(source.text_hits({"zebra": 1.0}, 5))
    assert {hit.doc_id for hit in found} == {"old.md", "new.md"}
    new_hit = next(hit for hit in found if hit.doc_id == "new.md")
    assert new_hit.text == chunks[0].text and new_hit.section == chunks[0].section


def test_kept_hit_fields_are_bounded_and_give_the_same_hits(tmp_path, monkeypatch):
    """The kept copy keeps the fields of rows it made hits of, at most FIELDS_KEPT; past that
    it starts again, and every search gives the hits it gave before."""
    from tasks.search import kept_chunks

    uri = str(tmp_path / "index")
    build_index(
        uri, [document(f"{name}.md", [(name, f"{name} zebra crossing")]) for name in "abcdef"]
    )
    searcher = Searcher(Dataset(uri), keep_vectors=True)
    params = SearchParams(k=6, mode="vector")
    first = searcher.search("zebra", params)
    kept = searcher.kept_chunks()
    assert kept is not None and len(kept._fields) == 6
    monkeypatch.setattr(kept_chunks, "FIELDS_KEPT", 4)
    again = searcher.search("zebra", params)  # all six known: nothing read, nothing cleared
    assert again == first and len(kept._fields) == 6
    kept._fields.pop(next(iter(kept._fields)))  # one row to read again: 6 > 4, so clear first
    kept._fields[99] = {}  # a row no search of this table shows: cleared with the rest
    assert searcher.search("zebra", params) == first
    assert sorted(kept._fields) == [0, 1, 2, 3, 4, 5]
