"""Prefect caching semantics through the real flow: content keys, never stale, never lying."""

from __future__ import annotations

import shutil
import uuid

import lancedb
import pytest

import tasks.parse.document as document_module
from flows.ingest import ingest
from tasks.core.reasons import Reason
from tasks.dataset.location import DatasetError
from tasks.dataset.schema import CHUNKS_TABLE
from tasks.ingest.steps import write_task

pytestmark = pytest.mark.integration


def unique_corpus(path, n=3):
    """Markdown files with text no other test uses, so no earlier cache entry can match."""
    path.mkdir()
    token = uuid.uuid4().hex
    for i in range(n):
        body = " ".join(f"Sentence {j} of note {i} about topic {token}." for j in range(30))
        (path / f"note{i}.md").write_text(f"# Note {i}\n\n{body}\n", "utf-8")
    return path


def chunk_set(uri):
    rows = lancedb.connect(uri).open_table(CHUNKS_TABLE).to_arrow().to_pylist()
    return sorted((r["chunk_id"], r["text_hash"]) for r in rows)


@pytest.fixture
def count_partitions(monkeypatch):
    calls = []
    real = document_module.read_blocks
    monkeypatch.setattr(
        document_module, "read_blocks", lambda s, d, o: calls.append(s.doc_id) or real(s, d, o)
    )
    return calls


def test_deleted_dataset_is_rebuilt_fully(prefect_backend, tmp_path):
    corpus, uri = unique_corpus(tmp_path / "docs"), str(tmp_path / "index")
    first = ingest(source_dir=str(corpus), index_uri=uri)
    before = chunk_set(uri)
    shutil.rmtree(uri)
    again = ingest(source_dir=str(corpus), index_uri=uri)
    assert again.indexed == first.indexed == 3
    assert chunk_set(uri) == before, "cached steps, but every row really written again"


def test_a_rebuild_answered_from_the_cache_counts_its_vectors_as_cached(prefect_backend, tmp_path):
    """The embed step's cache gives a rebuild every vector: the summary says so, and claims
    no embedding this run did not do."""
    corpus, uri = unique_corpus(tmp_path / "docs"), str(tmp_path / "index")
    first = ingest(source_dir=str(corpus), index_uri=uri, model="hash")
    again = ingest(source_dir=str(corpus), index_uri=uri, model="hash", rebuild=True)
    assert (first.chunks_cached, again.indexed) == (0, 3) and first.chunks_embedded > 0
    assert (again.chunks_embedded, again.chunks_cached) == (0, first.chunks_embedded)
    assert f"(0 embedded, {first.chunks_embedded} cached, 0 reused, 0 deleted)" in again.render()


def test_changed_splitter_settings_refuse_then_rebuild(prefect_backend, tmp_path):
    corpus, uri = unique_corpus(tmp_path / "docs"), str(tmp_path / "index")
    ingest(source_dir=str(corpus), index_uri=uri)
    before = chunk_set(uri)
    with pytest.raises(DatasetError, match="--rebuild"):
        ingest(source_dir=str(corpus), index_uri=uri, chunk_size=300, chunk_overlap=30)
    assert chunk_set(uri) == before, "a refused run changes nothing"
    rebuilt = ingest(
        source_dir=str(corpus), index_uri=uri, chunk_size=300, chunk_overlap=30, rebuild=True
    )
    rows = lancedb.connect(uri).open_table(CHUNKS_TABLE).to_arrow().to_pylist()
    assert rebuilt.indexed == 3 and len(rows) > len(before)
    assert max(len(r["text"]) for r in rows) <= 300


def test_rerun_after_failed_writes_reuses_finished_work(
    prefect_backend, tmp_path, monkeypatch, count_partitions
):
    """Every write fails (after retries): the run records the files failed; the next run
    writes them all without parsing or embedding anything again."""
    corpus, uri = unique_corpus(tmp_path / "docs"), str(tmp_path / "index")

    def disk_full(*args, **kwargs):
        raise OSError("injected: disk full")

    with monkeypatch.context() as patch:
        patch.setattr(write_task, "fn", disk_full)
        patch.setattr(write_task, "retries", 0)
        failed = ingest(source_dir=str(corpus), index_uri=uri, batch_size=1, parse_timeout=0)
    assert [problem.reason for problem in failed.failed] == [Reason.BATCH_FAILED] * 3
    assert sorted(count_partitions) == ["note0.md", "note1.md", "note2.md"]
    assert chunk_set(uri) == []

    count_partitions.clear()
    summary = ingest(source_dir=str(corpus), index_uri=uri, batch_size=1, parse_timeout=0)
    assert summary.indexed == 3 and summary.failed == []
    assert count_partitions == [], "every load came from the cache"
    assert {chunk_id.split(":")[0] for chunk_id, _ in chunk_set(uri)} == {
        "note0.md",
        "note1.md",
        "note2.md",
    }


def test_edited_file_is_never_served_from_a_stale_cache(
    prefect_backend, tmp_path, count_partitions
):
    corpus, uri = unique_corpus(tmp_path / "docs", n=1), str(tmp_path / "index")
    ingest(source_dir=str(corpus), index_uri=uri, parse_timeout=0)
    (corpus / "note0.md").write_text(
        "# Note 0\n\nCompletely new words about lighthouses.\n", "utf-8"
    )
    summary = ingest(source_dir=str(corpus), index_uri=uri, parse_timeout=0)
    assert summary.indexed == 1 and count_partitions == ["note0.md", "note0.md"]
    texts = [
        r["text"] for r in lancedb.connect(uri).open_table(CHUNKS_TABLE).to_arrow().to_pylist()
    ]
    assert texts == ["Note 0\n\nCompletely new words about lighthouses."]
