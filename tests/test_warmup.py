"""The warm-up while Prefect starts: only a run that will index files loads anything."""

from __future__ import annotations

from tasks.core.records import Block, Document
from tasks.dataset.dataset import Dataset
from tasks.dataset.schema import Fingerprint
from tasks.embed.hash_backend import HashEmbedder
from tasks.embed.models import model_info
from tasks.ingest.discover import discover
from tasks.ingest.settings import IngestSettings
from tasks.ingest.warmup import will_index
from tasks.text.split import SplitSettings, split_document


def settings_for(tmp_path, **changes) -> IngestSettings:
    return IngestSettings(
        source_dir=str(tmp_path / "docs"), index_uri=str(tmp_path / "index"), model="hash"
    ).model_copy(update=changes)


def index_as_is(settings: IngestSettings) -> None:
    """Write the folder's files into the dataset as an ingest run would record them."""
    split = settings.narrow(SplitSettings)
    dataset = Dataset(settings.index_uri)
    dataset.prepare(Fingerprint.of(model_info(settings.model), split))
    documents = [
        Document(source, source.doc_id, (Block("Some words to index.", "Top", 1),))
        for source in discover(settings.source_dir).files
    ]
    chunks = [chunk for doc in documents for chunk in split_document(doc, split).chunks]
    embedder = HashEmbedder(model_info(settings.model).dimension)
    dataset.write_batch(documents, chunks, embedder.encode([c.text for c in chunks]))


def test_only_a_run_that_will_index_files_warms_up(tmp_path):
    (tmp_path / "docs").mkdir()
    settings = settings_for(tmp_path)
    assert not will_index(settings), "an empty folder and no dataset: nothing to load"

    (tmp_path / "docs" / "a.md").write_text("# A\n\nSome words to index.\n")
    assert will_index(settings), "a new dataset"

    index_as_is(settings)
    assert not will_index(settings), "nothing changed since the last run"
    assert will_index(settings.model_copy(update={"rebuild": True}))
    assert not will_index(settings.model_copy(update={"chunk_size": 500})), (
        "another fingerprint: the run stops and asks for --rebuild"
    )

    (tmp_path / "docs" / "a.md").write_text("# A\n\nOther words.\n")
    assert will_index(settings), "a changed file"
