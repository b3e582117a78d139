"""The batch pipeline: loads run ahead, embeds stay in flight, writes happen in batch order.

It knows nothing of Prefect. The ingest flow hands it `Stages` whose `load` and `embed`
submit Prefect tasks to the flow's task runner (so parsing, embedding and writing overlap)
and whose `split` and `write` run in the flow process; tests hand it fakes
(tests/test_pipeline.py). A batch that fails at any step is recorded as failed by
`Stages.fail` and the pipeline goes on with the next one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import numpy as np

from tasks.core.options import Settings, option
from tasks.core.records import Chunk, Document, SourceFile
from tasks.text.split import SplitResult

T = TypeVar("T", covariant=True)

LOAD_AHEAD = 2  # batches loaded ahead of those being embedded
# The first batch holds at most this many files: the model starts on the first few parsed
# files instead of waiting for a whole batch to parse (the other batches parse meanwhile).
FIRST_BATCH_FILES = 4


class BatchSettings(Settings):
    """How the files to index are cut into batches (one task run per step per batch)."""

    batch_size: int = option(32, "at most this many files per batch", ge=1)
    batch_mb: float = option(
        4.0, "at most this many MiB of files per batch; a larger file is a batch of its own", gt=0
    )


@dataclass(frozen=True)
class Batch:
    """Some of the files to index, numbered for task-run names and logs."""

    number: int
    total: int
    files: tuple[SourceFile, ...]

    @property
    def label(self) -> str:
        return f"[batch {self.number}/{self.total}]"


def file_batches(files: Sequence[SourceFile], settings: BatchSettings) -> list[Batch]:
    """The files in batches of at most `batch_size` files and `batch_mb` MiB, in order; the
    first batch of at most FIRST_BATCH_FILES files.

    The byte limit keeps batches of big files small: one batch's chunks are in memory at
    once. The first embed waits for the first batch's parse, hence its smaller size.
    """
    max_bytes = settings.batch_mb * 2**20
    parts: list[list[SourceFile]] = []
    held = 0
    for source in files:
        limit = (
            min(settings.batch_size, FIRST_BATCH_FILES) if len(parts) == 1 else settings.batch_size
        )
        if not parts or len(parts[-1]) >= limit or held + source.size > max_bytes:
            parts.append([])
            held = 0
        parts[-1].append(source)
        held += source.size
    return [Batch(n, len(parts), tuple(part)) for n, part in enumerate(parts, start=1)]


class Future(Protocol[T]):
    """What `Stages` submit: a Prefect future, a concurrent.futures one, or a test's fake."""

    def result(self) -> T: ...


@dataclass(frozen=True)
class Vectors:
    """A batch's vectors, one per chunk in order, and how many were computed or reused."""

    vectors: np.ndarray
    embedded: int = 0  # distinct texts the model encoded
    reused: int = 0  # chunks whose vector was already stored


class Stages(Protocol):
    """The steps the pipeline runs for each batch."""

    def load(self, batch: Batch) -> Future[list[Document]]:
        """Submit loading the batch's files (may run ahead of the other steps)."""
        ...

    def split(self, batch: Batch, documents: list[Document]) -> list[SplitResult]:
        """Chunk the loaded documents, one result per document."""
        ...

    def embed(self, batch: Batch, chunks: list[Chunk]) -> Future[Vectors]:
        """Submit embedding the chunks (stays in flight while the next batch is split)."""
        ...

    def write(
        self, batch: Batch, documents: list[Document], chunks: list[Chunk], vectors: Vectors
    ) -> None:
        """Commit the batch to the dataset."""
        ...

    def fail(self, batch: Batch, error: Exception) -> list[Document]:
        """Record every file of a batch that failed after its retries as failed."""
        ...


class StageClock(Protocol):
    def timed(self, stage: str) -> AbstractContextManager[object]: ...


class _NoClock:
    def timed(self, stage: str) -> AbstractContextManager[object]:
        return nullcontext()


NO_CLOCK = _NoClock()


@dataclass
class BatchOutcome:
    """What became of one batch: its documents' final state and what it wrote."""

    batch: Batch
    documents: list[Document]
    splits: list[SplitResult] = field(default_factory=list)
    vectors: Vectors | None = None
    error: Exception | None = None  # the batch failed after its retries

    @property
    def chunks_written(self) -> int:
        return 0 if self.vectors is None else len(self.vectors.vectors)


@dataclass
class _InFlight:
    batch: Batch
    documents: list[Document]
    splits: list[SplitResult]
    chunks: list[Chunk]
    vectors: Future[Vectors]


def run_batches(
    batches: Sequence[Batch],
    stages: Stages,
    in_flight: int = 1,
    load_ahead: int = LOAD_AHEAD,
    clock: StageClock = NO_CLOCK,
) -> Iterator[BatchOutcome]:
    """Run every batch through load → split → embed → write, yielding outcomes in order.

    Loads are submitted up to `in_flight + load_ahead` batches ahead of the batch being
    split; up to `in_flight` embeds run at once; writes happen here, in batch order, so the
    dataset commits batches in the order of the plan. `clock` times the waits and the steps
    that run here (stages "load (waiting)", "split", "embed", "write").
    """
    loads: dict[int, Future[list[Document]]] = {}
    embedding: deque[_InFlight] = deque()
    for index, batch in enumerate(batches):
        for ahead in batches[index : index + in_flight + load_ahead]:
            if ahead.number not in loads and ahead.number >= batch.number:
                loads[ahead.number] = stages.load(ahead)
        try:
            with clock.timed("load (waiting)"):
                documents = loads.pop(batch.number).result()
            with clock.timed("split"):
                splits = stages.split(batch, documents)
            chunks = [chunk for result in splits for chunk in result.chunks]
            embedding.append(
                _InFlight(batch, documents, splits, chunks, stages.embed(batch, chunks))
            )
        except Exception as exc:  # noqa: BLE001 - the batch failed after its retries
            yield BatchOutcome(batch, stages.fail(batch, exc), error=exc)
            continue
        while len(embedding) >= in_flight:
            yield _finish(embedding.popleft(), stages, clock)
    while embedding:
        yield _finish(embedding.popleft(), stages, clock)


def _finish(flight: _InFlight, stages: Stages, clock: StageClock) -> BatchOutcome:
    """Wait for a batch's vectors and write it; a failure stays with this batch."""
    try:
        with clock.timed("embed"):
            vectors = flight.vectors.result()
        with clock.timed("write"):
            stages.write(flight.batch, flight.documents, flight.chunks, vectors)
    except Exception as exc:  # noqa: BLE001 - the batch failed after its retries
        return BatchOutcome(flight.batch, stages.fail(flight.batch, exc), error=exc)
    return BatchOutcome(flight.batch, flight.documents, flight.splits, vectors)


@dataclass(frozen=True)
class Done(Future[T]):
    """A future that is already resolved."""

    value: T

    def result(self) -> T:
        return self.value
