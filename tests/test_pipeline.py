"""The batch pipeline on fake stages: no model, no Prefect, no dataset.

Loads run ahead, embeds stay in flight, writes happen in order, and a batch that fails at
any step is recorded failed while the others go through.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pytest

from tasks.core.reasons import Reason, Status
from tasks.core.records import Block, Chunk, Document, SourceFile
from tasks.ingest.pipeline import (
    Batch,
    BatchSettings,
    CommitSettings,
    Done,
    Vectors,
    file_batches,
    run_batches,
)
from tasks.ingest.reuse import assemble, texts_to_embed
from tasks.text.split import SplitResult, SplitSettings, split_document


def sources(n: int) -> list[SourceFile]:
    return [
        SourceFile(f"f{i}.md", f"/c/f{i}.md", 10, 0, f"h{i}", "text/markdown") for i in range(n)
    ]


@dataclass
class FakeStages:
    """Records what happens when; `failing` maps a step to the batch numbers it fails on."""

    failing: dict[str, set[int]] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)

    def _maybe_fail(self, step: str, batch: Batch) -> None:
        if batch.number in self.failing.get(step, set()):
            raise RuntimeError(f"{step} broke on batch {batch.number}")

    def load(self, batch: Batch) -> Future:
        self.events.append(f"load {batch.number}")
        future: Future = Future()
        documents = [Document(s, s.doc_id, (Block(f"text of {s.doc_id}"),)) for s in batch.files]
        if batch.number in self.failing.get("load", set()):
            future.set_exception(RuntimeError(f"load broke on batch {batch.number}"))
        else:
            future.set_result(documents)
        return future

    def split(self, batch: Batch, documents: list[Document]) -> list[SplitResult]:
        self.events.append(f"split {batch.number}")
        self._maybe_fail("split", batch)
        settings = SplitSettings(chunk_size=100, chunk_overlap=0)
        return [split_document(document, settings) for document in documents]

    def embed(self, batch: Batch, chunks: list[Chunk]) -> Future:
        self.events.append(f"embed {batch.number}")
        future: Future = Future()
        if batch.number in self.failing.get("embed", set()):
            future.set_exception(RuntimeError(f"embed broke on batch {batch.number}"))
        else:
            future.set_result(Vectors(np.ones((len(chunks), 4), np.float32), len(chunks), 0))
        return future

    def write(self, batches: list[Batch], documents, chunks, vectors: np.ndarray) -> None:
        for batch in batches:
            self._maybe_fail("write", batch)
        assert len(chunks) == len(vectors) and len(documents) == sum(len(b.files) for b in batches)
        self.events.append("write " + "+".join(str(batch.number) for batch in batches))

    def fail(self, batch: Batch, error: Exception) -> list[Document]:
        self.events.append(f"fail {batch.number}")
        return [Document.not_indexed(s, Reason.BATCH_FAILED, str(error)) for s in batch.files]


def batches(n_files: int, per_batch: int = 1) -> list[Batch]:
    return file_batches(sources(n_files), BatchSettings(batch_size=per_batch))


def test_the_first_batch_loads_alone_then_the_next_ones_load_ahead():
    """The model waits for the first batch: no other batch shares the parsers with it."""

    class Recorded(FakeStages):
        def load(self, batch: Batch) -> Future:
            future = super().load(batch)
            result = future.result

            def recorded_result(timeout: float | None = None) -> list[Document]:
                self.events.append(f"loaded {batch.number}")
                return result(timeout)

            future.result = recorded_result  # type: ignore[method-assign]
            return future

    stages = Recorded()
    list(run_batches(batches(5), stages, in_flight=1, load_ahead=2))
    assert stages.events[:5] == ["load 1", "loaded 1", "load 2", "load 3", "split 1"]
    failing = Recorded(failing={"load": {1}})
    outcomes = list(run_batches(batches(3), failing, in_flight=1, load_ahead=2))
    assert [o.error is None for o in outcomes] == [False, True, True], "a failed first load"


def test_loads_run_ahead_and_writes_follow_batch_order():
    stages = FakeStages()
    outcomes = list(run_batches(batches(5), stages, in_flight=1, load_ahead=2))
    assert [o.batch.number for o in outcomes] == [1, 2, 3, 4, 5]
    assert all(o.error is None and o.chunks_written == 1 for o in outcomes)
    events = stages.events
    # Before the first split, batch 1 and the next two are already loading.
    assert events[:4] == ["load 1", "load 2", "load 3", "split 1"]
    # Every batch is written after it was embedded, and writes come in batch order.
    writes = [e for e in events if e.startswith("write")]
    assert writes == [f"write {n}" for n in range(1, 6)]
    for n in range(1, 6):
        assert events.index(f"load {n}") < events.index(f"split {n}") < events.index(f"write {n}")
    assert sorted(e for e in events if e.startswith("load")) == [f"load {n}" for n in range(1, 6)]


def test_with_two_in_flight_the_next_batch_is_embedding_before_the_first_is_written():
    stages = FakeStages()
    list(run_batches(batches(4), stages, in_flight=2, load_ahead=1))
    events = stages.events
    assert events.index("embed 2") < events.index("write 1")
    assert events.index("load 4") < events.index("split 2"), "in_flight + load_ahead ahead"


@pytest.mark.parametrize("step", ["load", "split", "embed", "write"])
def test_a_batch_that_fails_at_any_step_is_recorded_and_the_rest_go_on(step):
    stages = FakeStages(failing={step: {2}})
    outcomes = list(run_batches(batches(4), stages))
    assert [o.batch.number for o in outcomes] == [1, 2, 3, 4]
    failed = outcomes[1]
    assert failed.error is not None and f"{step} broke on batch 2" in str(failed.error)
    assert [d.status for d in failed.documents] == [Status.FAILED]
    assert failed.documents[0].reason == Reason.BATCH_FAILED
    assert "fail 2" in stages.events and "write 2" not in stages.events
    assert [f"write {n}" for n in (1, 3, 4)] == [e for e in stages.events if "write" in e]


def test_no_batches_do_nothing():
    stages = FakeStages()
    assert list(run_batches([], stages)) == []
    assert stages.events == []


def test_it_runs_on_real_threads_too():
    """The same pipeline with a thread pool as the task runner (what Prefect's is made of)."""
    with ThreadPoolExecutor(2) as pool:

        class ThreadStages(FakeStages):
            def load(self, batch):
                docs = [Document(s, s.doc_id, (Block(f"words {s.doc_id}"),)) for s in batch.files]
                return pool.submit(lambda: docs)

            def embed(self, batch, chunks):
                return pool.submit(lambda: Vectors(np.zeros((len(chunks), 4), np.float32)))

        outcomes = list(run_batches(batches(6, per_batch=2), ThreadStages(), in_flight=2))
    assert [o.batch.number for o in outcomes] == [1, 2, 3]
    assert sum(len(o.documents) for o in outcomes) == 6


def test_vectors_are_reused_by_text_hash_and_new_texts_embedded_once():
    chunks = [Chunk(f"d:{i}", "d", i, 3, text, 0, 4, "", 0, None) for i, text in
              enumerate(["same", "other", "same"])]  # fmt: skip
    stored = {chunks[1].text_hash: np.full(2, 0.5, np.float32)}
    todo = texts_to_embed(chunks, stored)
    assert list(todo.values()) == ["same"], "each new text once; stored ones not at all"
    vectors = assemble(chunks, stored, {chunks[0].text_hash: np.ones(2, np.float32)}, 2)
    assert vectors.vectors.tolist() == [[1, 1], [0.5, 0.5], [1, 1]]
    assert (vectors.embedded, vectors.reused) == (1, 1)
    assert assemble([], {}, {}, 2).vectors.shape == (0, 2)
    assert Done(3).result() == 3


def test_embedded_batches_wait_and_are_written_together_once_enough_chunks_gathered():
    stages = FakeStages()
    commits = CommitSettings(commit_chunks=3, commit_mb=64, commit_seconds=3600)
    outcomes = list(run_batches(batches(7), stages, commits=commits))
    writes = [e for e in stages.events if e.startswith("write")]
    assert writes == ["write 1+2+3", "write 4+5+6", "write 7"], "by chunk count, then the rest"
    assert [o.batch.number for o in outcomes] == list(range(1, 8))
    assert all(o.error is None and o.chunks_written == 1 for o in outcomes)
    assert [o.batch.number for o in outcomes if o.ends_commit] == [3, 6, 7]
    # Each group is written after its last batch was embedded, before later ones are split.
    events = stages.events
    assert events.index("embed 3") < events.index("write 1+2+3") < events.index("split 5")


def test_commits_also_come_by_bytes_and_by_seconds_since_the_last_one():
    by_bytes = FakeStages()  # one chunk's text and vector: ~30 bytes; 40 bytes is past one
    commits = CommitSettings(commit_chunks=1000, commit_mb=40 / 2**20, commit_seconds=3600)
    list(run_batches(batches(4), by_bytes, commits=commits))
    assert [e for e in by_bytes.events if e.startswith("write")] == ["write 1+2", "write 3+4"]
    by_time = FakeStages()
    commits = CommitSettings(commit_chunks=1000, commit_mb=64, commit_seconds=0)
    list(run_batches(batches(3), by_time, commits=commits))
    assert [e for e in by_time.events if e.startswith("write")] == ["write 1", "write 2", "write 3"]


def test_a_failed_group_commit_fails_each_of_its_batches_and_the_next_group_goes_on():
    stages = FakeStages(failing={"write": {2}})
    commits = CommitSettings(commit_chunks=2, commit_mb=64, commit_seconds=3600)
    outcomes = {o.batch.number: o for o in run_batches(batches(4), stages, commits=commits)}
    assert [n for n, o in sorted(outcomes.items()) if o.error] == [1, 2]
    assert all(d.reason == Reason.BATCH_FAILED for n in (1, 2) for d in outcomes[n].documents)
    assert ["fail 1", "fail 2", "write 3+4"] == [
        e for e in stages.events if e.startswith(("fail", "write"))
    ]
