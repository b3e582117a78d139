"""The finalize's indexes: built once, then brought up to date by later runs, and used."""

from __future__ import annotations

import lancedb

import tasks.dataset.ann as ann_module
from tasks.core.records import Chunk, Document, SourceFile, chunk_id
from tasks.dataset.ann import vector_index
from tasks.dataset.dataset import Dataset
from tasks.dataset.schema import SEARCH_TEXT_COLUMN, VECTOR_COLUMN, Fingerprint
from tasks.dataset.upkeep import KEY_INDEXES
from tasks.embed.hash_backend import HashEmbedder
from tasks.text.split import SplitSettings

EMBEDDER = HashEmbedder(32)
FP = Fingerprint.of(EMBEDDER.info, SplitSettings())
WORDS = "alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega".split()


def notes(first: int, count: int) -> tuple[list[Document], list[Chunk]]:
    """`count` one-chunk documents; note k's text has the made-up word `wordk` in it."""
    documents, chunks = [], []
    for k in range(first, first + count):
        doc_id = f"note-{k:05d}.md"
        text = f"word{k} " + " ".join(WORDS[(k + i) % len(WORDS)] for i in range(6))
        chunks.append(Chunk(chunk_id(doc_id, 0, 1), doc_id, 0, 1, text, 0, len(text), "", 0, None))
        source = SourceFile(doc_id, f"/notes/{doc_id}", len(text), 0, f"h{k}", "text/markdown")
        documents.append(Document(source, doc_id))
    return documents, chunks


def write(dataset: Dataset, first: int, count: int) -> None:
    documents, chunks = notes(first, count)
    dataset.write_batch(documents, chunks, EMBEDDER.encode([c.text for c in chunks]))


def unindexed(uri: str) -> dict[str, int]:
    """Index name → rows of the chunks table it does not cover yet."""
    table = lancedb.connect(uri).open_table("chunks")
    return {i.name: table.index_stats(i.name).num_unindexed_rows for i in table.list_indices()}


def test_a_later_run_adds_its_rows_to_the_existing_indexes_and_search_uses_them(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(ann_module, "ANN_MIN_ROWS", 300)
    uri = str(tmp_path / "index")
    dataset = Dataset(uri)
    dataset.prepare(FP)
    write(dataset, 0, 400)
    dataset.finalize("run-1")
    first = unindexed(uri)
    assert dataset.indexed_columns() == {*KEY_INDEXES["chunks"], SEARCH_TEXT_COLUMN, VECTOR_COLUMN}
    assert set(first.values()) == {0}, first
    trained = vector_index(dataset.chunks).name

    write(dataset, 400, 150)  # a second run: fewer new rows than would double the table
    dataset.finalize("run-2")
    assert unindexed(uri) == first, "the same indexes, now covering every row"
    assert vector_index(dataset.chunks).name == trained, "updated, not retrained"
    searcher_view = Dataset(uri)
    found = searcher_view.matching("word512", ["chunk_id"], None, 3)
    assert [row["chunk_id"] for row in found][:1] == [chunk_id("note-00512.md", 0, 1)]
    _, [chunk] = notes(530, 1)
    nearest = searcher_view.nearest(EMBEDDER.encode([chunk.text])[0], ["chunk_id"], None, 1)
    assert [row["chunk_id"] for row in nearest] == [chunk.chunk_id]
    plan = searcher_view.chunks.search(EMBEDDER.encode([chunk.text])[0]).limit(1).explain_plan()
    assert "ANNSubIndex" in plan and "KNNVectorDistance" not in plan, "no scan of unindexed rows"
