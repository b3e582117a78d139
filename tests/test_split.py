"""The recursive character splitter and section-aware chunking (plain functions, no Prefect)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tasks.core.records import Block, Document, SourceFile, chunk_id, document_text
from tasks.text.split import SplitSettings, split_document, split_spans


def texts(text: str, config: SplitSettings) -> list[str]:
    return [text[a:b] for a, b in split_spans(text, config)]


def make_document(*blocks: Block, doc_id: str = "doc.md") -> Document:
    source = SourceFile(doc_id, f"/x/{doc_id}", 1, 0, "h", "text/markdown")
    return Document(source, "Doc", tuple(blocks))


def test_empty_and_blank_input_give_no_chunks():
    assert split_spans("", SplitSettings(chunk_size=10, chunk_overlap=2)) == []
    assert split_spans(" \n\n \t ", SplitSettings(chunk_size=10, chunk_overlap=2)) == []


def test_short_document_is_one_chunk():
    assert texts("A short note.", SplitSettings(chunk_size=100, chunk_overlap=10)) == [
        "A short note."
    ]


def test_paragraph_boundary_is_preferred():
    text = "First paragraph here.\n\nSecond one, longer."
    assert texts(text, SplitSettings(chunk_size=25, chunk_overlap=0)) == [
        "First paragraph here.",
        "Second one, longer.",
    ]


def test_recursive_deepening_down_to_single_characters():
    # No separator at all: the character fallback cuts exactly at chunk_size.
    assert texts("abcdefghij", SplitSettings(chunk_size=4, chunk_overlap=0)) == [
        "abcd",
        "efgh",
        "ij",
    ]
    # A long word inside a sentence is cut by characters, the rest by spaces.
    parts = texts("go supercalifragilistic now", SplitSettings(chunk_size=8, chunk_overlap=0))
    assert all(len(p) <= 8 for p in parts)
    assert "".join(parts).replace(" ", "") == "gosupercalifragilisticnow"


def test_small_pieces_are_merged_greedily():
    text = "a b c d e f g h"
    assert texts(text, SplitSettings(chunk_size=7, chunk_overlap=0)) == ["a b c d", "e f g h"]


def test_overlap_repeats_the_tail_of_the_previous_chunk():
    text = " ".join(f"w{i:02d}" for i in range(30))
    config = SplitSettings(chunk_size=24, chunk_overlap=8)
    spans = split_spans(text, config)
    assert len(spans) > 3
    for (a1, b1), (a2, _) in zip(spans, spans[1:], strict=False):
        assert a2 < b1, "consecutive chunks overlap"
        assert b1 - a2 <= config.chunk_overlap
        assert text[a2:b1] == text[a1:b1][-(b1 - a2) :], "overlap is the same text in both"


def test_cjk_sizes_are_counted_in_characters():
    text = "这是一个测试句子。" * 20  # 180 characters, 540 bytes in UTF-8
    parts = texts(text, SplitSettings(chunk_size=30, chunk_overlap=0))
    assert all(len(p) <= 30 for p in parts)
    assert all(p.endswith("。") for p in parts), "cut at the CJK full stop"
    assert "".join(parts) == text


def test_character_fallback_never_splits_a_grapheme():
    text = "e\u0301" * 9 + "👩‍👩‍👧" * 3  # combining accents and ZWJ family emoji
    for a, b in split_spans(text, SplitSettings(chunk_size=3, chunk_overlap=0)):
        piece = text[a:b]
        assert not piece.startswith(("\u0301", "\u200d")), piece
        assert not piece.endswith("\u200d"), piece


def test_invalid_settings_are_rejected_with_a_clear_error():
    with pytest.raises(ValueError, match="chunk_overlap .* must be smaller than chunk_size"):
        SplitSettings(chunk_size=100, chunk_overlap=100)
    with pytest.raises(ValueError, match="chunk_size\n.*greater than or equal to 1"):
        SplitSettings(chunk_size=0, chunk_overlap=0)
    with pytest.raises(ValueError, match="chunk_overlap\n.*greater than or equal to 0"):
        SplitSettings(chunk_size=10, chunk_overlap=-1)


def test_chunks_do_not_straddle_sections_and_inherit_their_metadata():
    doc = make_document(
        Block("Intro", "Intro", 1),
        Block("Words before the details. " * 3, "Intro", 1),
        Block("Details", "Intro > Details", 2),
        Block("Fine print.", "Intro > Details", 2),
        Block("Page two text.", "", 0, page_number=2),
    )
    result = split_document(doc, SplitSettings(chunk_size=1000, chunk_overlap=100))
    sections = [(c.section, c.heading_level, c.page_number) for c in result.chunks]
    assert sections == [("Intro", 1, None), ("Intro > Details", 2, None), ("", 0, 2)]
    assert result.chunks[1].text == "Details\n\nFine print."


def test_chunk_ids_counts_and_offsets():
    doc = make_document(Block("x " * 400, "S", 1))
    chunks = split_document(doc, SplitSettings(chunk_size=100, chunk_overlap=10)).chunks
    text = document_text(doc.blocks)
    assert [c.chunk_index for c in chunks] == list(range(len(chunks)))
    assert {c.chunk_count for c in chunks} == {len(chunks)}
    assert chunks[0].chunk_id == "doc.md:chunk:0000"
    assert all(text[c.char_start : c.char_end] == c.text for c in chunks)
    assert chunk_id("d", 7, 12345) == "d:chunk:00007", "wider ids when a document needs them"


def test_token_window_forces_a_second_split():
    doc = make_document(Block("alpha beta gamma delta " * 20, "S", 1))
    count_words = lambda texts: [len(t.split()) for t in texts]  # noqa: E731
    result = split_document(
        doc, SplitSettings(chunk_size=1000, chunk_overlap=50), count_words, max_tokens=16
    )
    assert result.refit == 1
    assert result.over_window == 0
    assert len(result.chunks) > 1
    assert max(count_words([c.text for c in result.chunks])) <= 16


def test_an_unsplittable_span_is_reported_not_hidden():
    doc = make_document(Block("x" * 50, "S", 1))
    config = SplitSettings(
        chunk_size=100, chunk_overlap=0, separators=("\n\n", " ")
    )  # no character fallback
    result = split_document(doc, config, lambda texts: [99 for _ in texts], max_tokens=10)
    assert result.over_window == 1
    assert [c.text for c in result.chunks] == ["x" * 50]


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(list("ab c。\n.？中文é")), max_size=400),
    size=st.integers(1, 60),
    overlap_share=st.floats(0, 0.9),
)
def test_spans_cover_the_text_within_size(text, size, overlap_share):
    config = SplitSettings(chunk_size=size, chunk_overlap=int(size * overlap_share))
    spans = split_spans(text, config)
    for a, b in spans:
        assert b - a <= size
        assert text[a:b] == text[a:b].strip() and b > a
    covered = set()
    for a, b in spans:
        covered.update(range(a, b))
    assert all(i in covered for i, ch in enumerate(text) if not ch.isspace())
    assert spans == sorted(spans)
