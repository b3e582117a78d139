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


def test_the_warm_up_and_the_run_share_one_parser_pool_made_for_the_first_callers_model(
    monkeypatch,
):
    """The pool is made once per process, by whoever readies a run first (the warm-up, the
    watcher or TaskStages), for that run's model; the run's loads use the same pool."""
    from tasks.core.cores import usable_cores
    from tasks.ingest import load
    from tasks.parse.worker import WORKERS_ENV

    monkeypatch.delenv(WORKERS_ENV, raising=False)
    monkeypatch.setattr(load, "_POOL", [])  # this test's process has made none yet
    first = load.process_parsers(model_info("hash:8").busy_cores)
    assert load.process_parsers(model_busy_cores=True) is first, "the later caller's model"
    assert load.process_parsers() is first, "what a load task finds"
    assert len(first.workers()) == usable_cores(), "sized for the first caller's model"


def test_the_first_pass_clock_marks_the_first_embed_with_texts_only():
    from tasks.ingest.steps import FirstPassClock, embed_texts

    clock = FirstPassClock()
    embed_texts([], "hash:8", clock)
    assert clock.first_forward_pass() is None, "nothing to embed: no forward pass"
    embed_texts(["some words"], "hash:8", clock)
    first = clock.first_forward_pass()
    assert first is not None and first > 0, "seconds after this process started"
    embed_texts(["more words"], "hash:8", clock)
    assert clock.first_forward_pass() == first, "only the first pass counts"
    assert FirstPassClock().first_forward_pass() is None, "each run holds its own"
