"""The semantic splitter: plain functions with a fake embedder (no model), and once through
the real ingest flow on data/sample with the real model (marked integration and model)."""

from __future__ import annotations

import lancedb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flows.ingest import ingest
from flows.query_flow import query
from tasks.core.reasons import Reason
from tasks.core.records import Block, Document, SourceFile, document_text
from tasks.dataset.dataset import Dataset
from tasks.dataset.location import DatasetError
from tasks.dataset.schema import CHUNKS_TABLE, Fingerprint
from tasks.embed.hash_backend import HashEmbedder, hash_model_info
from tasks.ingest.settings import IngestSettings
from tasks.ingest.steps import split_batch
from tasks.text.semantic_split import (
    gap_distances,
    group_sentences,
    semantic_spans,
    sentence_spans,
    split_documents_semantic,
)
from tasks.text.split import SplitSettings

from .conftest import SAMPLE
from .test_split import make_document

SEMANTIC = SplitSettings(splitter="semantic")
TOPICS = {
    "cat": 0, "cats": 0, "kitten": 0, "purr": 0, "mice": 0,
    "rocket": 1, "rockets": 1, "orbit": 1, "fuel": 1, "launch": 1,
    "bread": 2, "dough": 2, "oven": 2, "flour": 2,
}  # fmt: skip


def topic_embed(texts: list[str]) -> np.ndarray:
    """A fake model: one dimension per topic, counting the topic's words (plus a little of a
    shared dimension, so a sentence without topic words is not a zero vector)."""
    vectors = np.zeros((len(texts), 4), np.float32)
    for row, text in enumerate(texts):
        vectors[row, 3] = 0.1
        for word in text.lower().replace(".", " ").replace("。", " ").split():
            if word in TOPICS:
                vectors[row, TOPICS[word]] += 1.0
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


CATS = "Cats purr when calm. A kitten chases mice. Cats like mice and purr. "
ROCKETS = "A rocket burns fuel. Rockets reach orbit after launch. The rocket needs fuel."
BREAD = " Bread needs flour. The dough rests. The oven bakes the bread dough."


def texts_of(text: str, spans: list[tuple[int, int]]) -> list[str]:
    return [text[a:b] for a, b in spans]


def test_sentences_end_at_english_and_chinese_marks_and_line_breaks():
    text = 'He said "stop." Then left! Why? Pi is 3.14 here.\nNext line\n\n'
    text += "猫在睡觉。火箭升空！真的吗？好"
    assert texts_of(text, sentence_spans(text, 0, len(text), 1000)) == [
        'He said "stop."',
        "Then left!",
        "Why?",
        "Pi is 3.14 here.",
        "Next line",
        "猫在睡觉。",
        "火箭升空！",
        "真的吗？",
        "好",
    ]


def test_a_sentence_longer_than_the_chunk_size_is_cut_into_pieces():
    text = "word " * 50 + "end."
    pieces = texts_of(text, sentence_spans(text, 0, len(text), 30))
    assert len(pieces) > 1 and all(len(piece) <= 30 for piece in pieces)
    assert "".join(pieces).replace(" ", "") == text.replace(" ", "")


def test_the_cut_lands_where_the_topic_changes():
    text = CATS + ROCKETS
    chunks = texts_of(text, semantic_spans(text, SEMANTIC, topic_embed))
    assert chunks == [CATS.strip(), ROCKETS]


def test_three_topics_give_three_chunks_at_a_lower_percentile():
    text = CATS + ROCKETS + BREAD
    config = SplitSettings(splitter="semantic", breakpoint_percentile=75)
    chunks = texts_of(text, semantic_spans(text, config, topic_embed))
    assert chunks == [CATS.strip(), ROCKETS, BREAD.strip()]


def test_gap_distances_compare_the_windows_on_either_side():
    one, two = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    distances = gap_distances(np.stack([one, one, two, two]), window=2)
    assert distances[1] == pytest.approx(1.0)  # cats | rockets
    assert distances[0] == pytest.approx(1 - 1 / np.sqrt(2))  # [one] vs [one, two]
    assert gap_distances(np.stack([one]), window=2).shape == (0,)


def test_a_group_longer_than_the_chunk_size_is_cut_at_its_most_distant_gap():
    sentences = [(0, 10), (11, 20), (21, 30), (31, 40)]
    distances = np.array([0.1, 0.5, 0.2])
    assert group_sentences(sentences, distances, None, 40) == [(0, 40)]
    assert group_sentences(sentences, distances, None, 25) == [(0, 20), (21, 40)]
    assert group_sentences(sentences, distances, None, 15) == [
        (0, 10),
        (11, 20),
        (21, 30),
        (31, 40),
    ]
    assert group_sentences(sentences, distances, 0.15, 100) == [(0, 20), (21, 30), (31, 40)]
    assert group_sentences([], np.zeros(0), None, 10) == []


def test_chunks_keep_sections_and_are_spans_of_the_document_text():
    doc = make_document(
        Block("Cats", "Cats", 1),
        Block(CATS + ROCKETS, "Cats", 1),
        Block("Bread", "Bread", 1),
        Block(BREAD.strip(), "Bread", 1),
    )
    [result] = split_documents_semantic(
        [doc], SEMANTIC, lambda texts: [len(t.split()) for t in texts], 1000, topic_embed
    )
    text = document_text(doc.blocks)
    assert all(text[c.char_start : c.char_end] == c.text for c in result.chunks)
    assert [c.section for c in result.chunks] == ["Cats", "Cats", "Bread"]
    assert result.chunks[1].text == ROCKETS
    assert [c.chunk_index for c in result.chunks] == [0, 1, 2]


def test_chunks_fit_the_token_window_without_overlap():
    doc = make_document(Block("Cats purr. " * 40, "S", 1))
    count_words = lambda texts: [len(t.split()) for t in texts]  # noqa: E731
    [result] = split_documents_semantic([doc], SEMANTIC, count_words, 16, topic_embed)
    assert max(count_words([c.text for c in result.chunks])) <= 16
    assert result.over_window == 0
    ends = [(c.char_start, c.char_end) for c in result.chunks]
    assert all(b1 <= a2 for (_, b1), (a2, _) in zip(ends, ends[1:], strict=False))


def test_documents_not_indexed_get_no_chunks_and_the_batch_embeds_once():
    calls = []

    def counting_embed(texts: list[str]) -> np.ndarray:
        calls.append(len(texts))
        return topic_embed(texts)

    indexed = make_document(Block(CATS + ROCKETS, "S", 1))
    source = SourceFile("bad.pdf", "/x/bad.pdf", 1, 0, "h", "application/pdf")
    failed = Document.not_indexed(source, Reason.DAMAGED_PDF, "broken")
    results = split_documents_semantic(
        [failed, indexed, indexed], SEMANTIC, lambda t: [1] * len(t), 100, counting_embed
    )
    assert [len(r.chunks) for r in results] == [0, 2, 2]
    assert calls == [12]


def test_the_ingest_step_wires_in_the_model(tmp_path):
    doc = make_document(Block(CATS + ROCKETS + BREAD, "S", 1))
    [semantic] = split_batch([doc], SEMANTIC, "hash:64")
    [recursive] = split_batch([doc], SplitSettings(), "hash:64")
    assert len(recursive.chunks) == 1 and len(semantic.chunks) >= 1
    text = document_text(doc.blocks)
    assert all(text[c.char_start : c.char_end] == c.text for c in semantic.chunks)
    settings = IngestSettings(source_dir=str(tmp_path), splitter="semantic")
    assert settings.narrow(SplitSettings) == SEMANTIC


def test_the_fingerprint_records_the_splitter():
    model = hash_model_info(8)
    recursive = Fingerprint.of(model, SplitSettings())
    assert recursive.splitter == (
        '{"chunk_size":1000,"chunk_overlap":100,'
        '"separators":["\\n\\n","\\n","。","？","！","."," ",""]}'
    ), "unchanged since before the semantic splitter, so existing datasets keep theirs"
    semantic = Fingerprint.of(model, SEMANTIC)
    assert '"splitter":"semantic"' in semantic.splitter and semantic.id != recursive.id
    other = Fingerprint.of(model, SplitSettings(splitter="semantic", breakpoint_percentile=80))
    assert other.id != semantic.id


def test_invalid_semantic_settings_are_refused():
    with pytest.raises(ValueError, match="breakpoint_percentile"):
        SplitSettings(splitter="semantic", breakpoint_percentile=101)
    with pytest.raises(ValueError, match="splitter"):
        SplitSettings(splitter="sentences")


EMBEDDER = HashEmbedder(16)


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(list("ab c。\n.？!中文é")), max_size=400),
    size=st.integers(1, 60),
    percentile=st.floats(0, 100),
)
def test_spans_cover_the_text_within_size_without_overlap(text, size, percentile):
    """The recursive splitter's invariants (tests/test_split.py), without overlap."""
    config = SplitSettings(
        splitter="semantic", chunk_size=size, chunk_overlap=0, breakpoint_percentile=percentile
    )
    spans = semantic_spans(text, config, EMBEDDER.encode)
    for a, b in spans:
        assert b - a <= size
        assert text[a:b] == text[a:b].strip() and b > a
    covered = set()
    for a, b in spans:
        covered.update(range(a, b))
    assert all(i in covered for i, ch in enumerate(text) if not ch.isspace())
    assert all(b1 <= a2 for (_, b1), (a2, _) in zip(spans, spans[1:], strict=False))


def chunk_rows(uri: str) -> list[dict]:
    table = lancedb.connect(uri).open_table(CHUNKS_TABLE)
    return table.to_arrow().select(["chunk_id", "doc_id", "text_hash", "text"]).to_pylist()


@pytest.mark.integration
@pytest.mark.model
def test_the_sample_through_the_ingest_flow_with_the_semantic_splitter(prefect_backend, tmp_path):
    """data/sample indexed with --splitter semantic by the real flow and model: every file
    indexed, nothing truncated, the fingerprint names the splitter, a question finds its
    chapter; another splitter (or percentile) on the same dataset asks for --rebuild."""
    uri = str(tmp_path / "index")
    summary = ingest(source_dir=str(SAMPLE), index_uri=uri, splitter="semantic")
    assert summary.failed == [] and summary.indexed == summary.files_seen > 0
    assert summary.chunks_truncated == 0
    rows = chunk_rows(uri)
    assert summary.chunks_written == len(rows) > summary.indexed
    assert all(len(row["text"]) <= SEMANTIC.chunk_size for row in rows)
    assert '"splitter":"semantic"' in Dataset(uri).fingerprint.splitter
    hits = query(text="How do references and borrowing work in Rust?", index_uri=uri, k=3)
    assert hits and hits[0].doc_id.startswith("rust-book/")

    before = sorted((row["chunk_id"], row["text_hash"]) for row in rows)
    with pytest.raises(DatasetError, match="--rebuild"):
        ingest(source_dir=str(SAMPLE), index_uri=uri)  # the recursive splitter
    with pytest.raises(DatasetError, match="--rebuild"):
        ingest(source_dir=str(SAMPLE), index_uri=uri, splitter="semantic", breakpoint_percentile=80)
    after = sorted((row["chunk_id"], row["text_hash"]) for row in chunk_rows(uri))
    assert after == before, "a refused run changes nothing"
