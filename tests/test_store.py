"""The LanceDB dataset: schema, fingerprint, atomic per-batch writes, escaping."""

from __future__ import annotations

from dataclasses import replace
from fnmatch import fnmatchcase

import lancedb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tasks.embed import HashEmbedder
from tasks.records import EMPTY, FAILED, Block, Document, SourceFile
from tasks.schema import CHUNKS_TABLE, DOCUMENTS_TABLE, fingerprint, glob_to_like, sql_string
from tasks.search import search_vector, source_filter
from tasks.split import SplitSettings, split_document
from tasks.store import (
    DatasetError,
    prepare_dataset,
    read_fingerprint,
    read_ledger,
    write_documents,
)

EMBEDDER = HashEmbedder(16)
FP = fingerprint(EMBEDDER.model_id, 16, 256, SplitSettings(60, 10))


def document(doc_id: str, *paragraphs: str, content_hash: str = "h1") -> Document:
    source = SourceFile(
        doc_id, f"/corpus/{doc_id}", 10, 1_700_000_000_000_000, content_hash, "text/markdown"
    )
    return Document(source, doc_id, tuple(Block(p, "Top", 1) for p in paragraphs))


def write(uri: str, *documents: Document):
    chunks = [c for d in documents for c in split_document(d, SplitSettings(60, 10)).chunks]
    return write_documents(
        uri, list(documents), chunks, EMBEDDER.encode([c.text for c in chunks]), FP
    )


def rows(uri: str, table: str = CHUNKS_TABLE) -> list[dict]:
    return lancedb.connect(uri).open_table(table).to_arrow().to_pylist()


def test_same_documents_twice_give_the_same_rows(tmp_path):
    uri = str(tmp_path / "index")
    prepare_dataset(uri, FP)
    docs = [
        document(
            "a.md", "First paragraph of a, long enough.", "Second paragraph of a, long enough."
        ),
        document("b.md", "Only b."),
    ]
    write(uri, *docs)
    first = sorted((r["chunk_id"], r["text_hash"]) for r in rows(uri))
    write(uri, *docs)
    second = sorted((r["chunk_id"], r["text_hash"]) for r in rows(uri))
    assert first == second and len(first) == len(set(first))
    assert {r["doc_id"]: r["n_chunks"] for r in rows(uri, DOCUMENTS_TABLE)} == {
        "a.md": 2,
        "b.md": 1,
    }


def test_a_changed_document_replaces_its_whole_chunk_set(tmp_path):
    uri = str(tmp_path / "index")
    prepare_dataset(uri, FP)
    write(
        uri, document("a.md", "one " * 20, "two " * 20, "three " * 20), document("b.md", "Keep me.")
    )
    write(uri, document("a.md", "Just one paragraph now.", content_hash="h2"))
    a_rows = [r for r in rows(uri) if r["doc_id"] == "a.md"]
    assert [r["text"] for r in a_rows] == ["Just one paragraph now."]
    assert a_rows[0]["chunk_count"] == 1 and a_rows[0]["doc_hash"] == "h2"
    assert [r["text"] for r in rows(uri) if r["doc_id"] == "b.md"] == ["Keep me."]


def test_a_failed_reindex_keeps_the_previous_chunks(tmp_path):
    uri = str(tmp_path / "index")
    prepare_dataset(uri, FP)
    write(uri, document("a.md", "Good old content."))
    broken = replace(document("a.md", content_hash="h2"), status=FAILED, error="parse_error: boom")
    write_documents(uri, [broken], [], EMBEDDER.encode([]), FP)
    assert [r["text"] for r in rows(uri)] == ["Good old content."]
    assert read_ledger(uri)["a.md"].status == FAILED


def test_a_document_that_became_empty_loses_its_chunks(tmp_path):
    uri = str(tmp_path / "index")
    prepare_dataset(uri, FP)
    write(uri, document("a.md", "Soon gone."), document("b.md", "Stays."))
    emptied = replace(document("a.md", content_hash="h2"), status=EMPTY, error="no_text: nothing")
    write_documents(uri, [emptied], [], EMBEDDER.encode([]), FP)
    assert [r["doc_id"] for r in rows(uri)] == ["b.md"]
    assert read_ledger(uri)["a.md"].status == EMPTY


def test_a_dataset_built_differently_is_refused(tmp_path):
    uri = str(tmp_path / "index")
    prepare_dataset(uri, FP)
    other = fingerprint("another/model", 16, 256, SplitSettings(60, 10))
    with pytest.raises(DatasetError, match="--rebuild"):
        prepare_dataset(uri, other)
    prepare_dataset(uri, other, rebuild=True)
    assert read_fingerprint(uri) == other


def test_missing_dataset_is_a_clear_error(tmp_path):
    with pytest.raises(DatasetError, match="no index at"):
        read_fingerprint(str(tmp_path / "nothing"))


def test_sql_string_doubles_quotes():
    assert sql_string("it's") == "'it''s'"
    assert glob_to_like("a_%\\*?.md") == "a\\_\\%\\\\%_.md"


AWKWARD = [
    "it's.md",
    "100%_done.md",
    "back\\slash.md",
    "' OR 1=1 --.md",
    "中文 文档.md",
    "plain.md",
]


@pytest.fixture(scope="module")
def awkward_index(tmp_path_factory):
    uri = str(tmp_path_factory.mktemp("awkward") / "index")
    prepare_dataset(uri, FP)
    write(uri, *[document(name, f"Text of {name}") for name in AWKWARD])
    return uri


@settings(max_examples=60, deadline=None)
@given(
    pattern=st.one_of(
        st.sampled_from(
            ["*", "*.md", "it's*", "100%_*", "*\\*", "' OR 1=1 --*", "中文*", "?lain.md", "%", "_*"]
        ),
        st.text(alphabet="*?%_'\\ab中 -=.", max_size=8),
    )
)
def test_source_glob_matches_exactly_what_fnmatch_matches(awkward_index, pattern):
    hits = search_vector(awkward_index, EMBEDDER.encode(["text"])[0], k=50, source_glob=pattern)
    expected = {
        name
        for name in AWKWARD
        if fnmatchcase(name, pattern) or fnmatchcase(f"/corpus/{name}", pattern)
    }
    assert {hit.doc_id for hit in hits} == expected
    assert source_filter(pattern).count("(") >= 1
