"""The LanceDB dataset: schema, fingerprint, atomic per-batch writes, escaping."""

from __future__ import annotations

from dataclasses import replace
from fnmatch import fnmatchcase

import lancedb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tasks.core.reasons import Reason, Status
from tasks.core.records import Block, Document, SourceFile
from tasks.dataset.dataset import Dataset
from tasks.dataset.location import DatasetError
from tasks.dataset.schema import CHUNKS_TABLE, DOCUMENTS_TABLE, Fingerprint
from tasks.dataset.sql import glob_to_like, sql_string
from tasks.embed.hash_backend import HashEmbedder
from tasks.search.filters import source_filter
from tasks.search.params import SearchParams
from tasks.search.searcher import Searcher
from tasks.text.split import SplitSettings, split_document

EMBEDDER = HashEmbedder(16)
SPLIT = SplitSettings(chunk_size=60, chunk_overlap=10)
FP = Fingerprint.of(EMBEDDER.info, SPLIT)


def prepared(uri: str) -> Dataset:
    dataset = Dataset(uri)
    dataset.prepare(FP)
    return dataset


def document(doc_id: str, *paragraphs: str, content_hash: str = "h1") -> Document:
    source = SourceFile(
        doc_id, f"/corpus/{doc_id}", 10, 1_700_000_000_000_000, content_hash, "text/markdown"
    )
    return Document(source, doc_id, tuple(Block(p, "Top", 1) for p in paragraphs))


def write(dataset: Dataset, *documents: Document) -> None:
    chunks = [c for d in documents for c in split_document(d, SPLIT).chunks]
    dataset.write_batch(list(documents), chunks, EMBEDDER.encode([c.text for c in chunks]))


def rows(uri: str, table: str = CHUNKS_TABLE) -> list[dict]:
    return lancedb.connect(uri).open_table(table).to_arrow().to_pylist()


def test_same_documents_twice_give_the_same_rows(tmp_path):
    uri = str(tmp_path / "index")
    dataset = prepared(uri)
    docs = [
        document(
            "a.md", "First paragraph of a, long enough.", "Second paragraph of a, long enough."
        ),
        document("b.md", "Only b."),
    ]
    write(dataset, *docs)
    first = sorted((r["chunk_id"], r["text_hash"]) for r in rows(uri))
    write(dataset, *docs)
    second = sorted((r["chunk_id"], r["text_hash"]) for r in rows(uri))
    assert first == second and len(first) == len(set(first))
    assert {r["doc_id"]: r["n_chunks"] for r in rows(uri, DOCUMENTS_TABLE)} == {
        "a.md": 2,
        "b.md": 1,
    }


def test_a_changed_document_replaces_its_whole_chunk_set(tmp_path):
    uri = str(tmp_path / "index")
    dataset = prepared(uri)
    write(
        dataset,
        document("a.md", "one " * 20, "two " * 20, "three " * 20),
        document("b.md", "Keep me."),
    )
    write(dataset, document("a.md", "Just one paragraph now.", content_hash="h2"))
    a_rows = [r for r in rows(uri) if r["doc_id"] == "a.md"]
    assert [r["text"] for r in a_rows] == ["Just one paragraph now."]
    assert a_rows[0]["chunk_count"] == 1 and a_rows[0]["doc_hash"] == "h2"
    assert [r["text"] for r in rows(uri) if r["doc_id"] == "b.md"] == ["Keep me."]


def test_a_failed_reindex_keeps_the_previous_chunks(tmp_path):
    uri = str(tmp_path / "index")
    dataset = prepared(uri)
    write(dataset, document("a.md", "Good old content."))
    broken = Document.not_indexed(
        document("a.md", content_hash="h2").source, Reason.PARSE_ERROR, "boom"
    )
    dataset.write_batch([broken], [], EMBEDDER.encode([]))
    assert [r["text"] for r in rows(uri)] == ["Good old content."]
    assert dataset.ledger()["a.md"].status == Status.FAILED
    ledger = {r["doc_id"]: r for r in rows(uri, DOCUMENTS_TABLE)}
    assert (ledger["a.md"]["reason"], ledger["a.md"]["error"]) == ("parse_error", "boom")


def test_a_document_that_became_empty_loses_its_chunks(tmp_path):
    uri = str(tmp_path / "index")
    dataset = prepared(uri)
    write(dataset, document("a.md", "Soon gone."), document("b.md", "Stays."))
    emptied = Document.not_indexed(
        document("a.md", content_hash="h2").source, Reason.NO_TEXT, "nothing"
    )
    dataset.write_batch([emptied], [], EMBEDDER.encode([]))
    assert [r["doc_id"] for r in rows(uri)] == ["b.md"]
    assert dataset.ledger()["a.md"].status == Status.EMPTY


def test_a_dataset_built_differently_is_refused(tmp_path):
    uri = str(tmp_path / "index")
    prepared(uri)
    other = replace(FP, model="another/model")
    with pytest.raises(DatasetError, match="--rebuild"):
        Dataset(uri).prepare(other)
    Dataset(uri).prepare(other, rebuild=True)
    assert Dataset(uri).fingerprint == other


def test_a_dataset_built_with_another_analyser_asks_for_a_rebuild(tmp_path):
    uri = str(tmp_path / "index")
    Dataset(uri).prepare(replace(FP, analyser="lancedb-default"))
    with pytest.raises(DatasetError, match="analyser lancedb-default.*--rebuild"):
        Dataset(uri).prepare(FP)


def test_a_dataset_of_an_older_layout_asks_for_a_rebuild(tmp_path):
    uri = str(tmp_path / "index")
    older = replace(FP, schema_version=FP.schema_version - 1)
    Dataset(uri).prepare(older)
    with pytest.raises(DatasetError, match="older doc-indexer.*--rebuild"):
        Dataset(uri).fingerprint  # noqa: B018


def test_a_dataset_without_a_column_of_the_layout_asks_for_a_rebuild(tmp_path):
    uri = str(tmp_path / "index")
    prepared(uri)
    lancedb.connect(uri).open_table(DOCUMENTS_TABLE).drop_columns(["ocr_pages"])
    with pytest.raises(DatasetError, match="no ocr_pages column.*--rebuild"):
        Dataset(uri).prepare(FP)
    Dataset(uri).prepare(FP, rebuild=True)


def test_missing_dataset_is_a_clear_error(tmp_path):
    with pytest.raises(DatasetError, match="no index at"):
        Dataset(str(tmp_path / "nothing")).fingerprint  # noqa: B018


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
    dataset = prepared(str(tmp_path_factory.mktemp("awkward") / "index"))
    write(dataset, *[document(name, f"Text of {name}") for name in AWKWARD])
    return Searcher(dataset)


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
    params = SearchParams(k=50, mode="vector", source=pattern)
    hits = awkward_index.search("text", params)
    expected = {
        name
        for name in AWKWARD
        if fnmatchcase(name, pattern) or fnmatchcase(f"/corpus/{name}", pattern)
    }
    assert {hit.doc_id for hit in hits} == expected
    assert source_filter(pattern).count("(") >= 1


def test_a_first_run_appends_and_a_retried_or_repeated_write_still_replaces(tmp_path, monkeypatch):
    """On an empty table the chunks are appended (no merge), yet the rows stay those of a
    replace: a document written twice, and a write retried after it failed between the
    chunks and the ledger, leave each chunk once; a dataset prepared again on a table with
    rows merges."""
    from tasks.dataset import chunk_store, ledger

    appended: list[bool] = []
    replace_chunks = chunk_store.replace_chunks

    def spy(*args, **kwargs):
        appended.append(args[-1] if len(args) > 6 else kwargs.get("append", False))
        return replace_chunks(*args, **kwargs)

    monkeypatch.setattr(chunk_store, "replace_chunks", spy)
    uri = str(tmp_path / "index")
    dataset = prepared(uri)
    a, b, c = (
        document("a.md", "Alpha text."),
        document("b.md", "Beta text."),
        document("c.md", "C."),
    )
    write(dataset, a)
    write(dataset, a, b)  # a again: merged
    record = ledger.record
    calls = {"n": 0}

    def fail_once(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError("disk full")
        return record(*args, **kwargs)

    monkeypatch.setattr(ledger, "record", fail_once)
    with pytest.raises(OSError):
        write(dataset, c)  # its chunks are committed, its ledger entry is not
    write(dataset, c)  # the retry
    assert appended == [True, False, True, False]
    ids = [r["chunk_id"] for r in rows(uri)]
    assert len(ids) == len(set(ids)) == 3
    assert sorted(dataset.ledger()) == ["a.md", "b.md", "c.md"]
    again = prepared(uri)
    write(again, document("d.md", "Delta."))
    assert appended[-1] is False, "a table with rows: merge"
