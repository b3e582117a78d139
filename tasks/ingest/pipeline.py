# Over 300 lines: loads ahead, embeds in flight and ordered commits are one schedule.
"""The batch pipeline: loads run ahead, embeds stay in flight, writes happen in batch order.

It knows nothing of Prefect. The ingest flow hands it `Stages` whose `load` and `embed`
submit Prefect tasks to the flow's task runner (so parsing, embedding and writing overlap)
and whose `split` and `write` run in the flow process; tests hand it fakes
(tests/test_pipeline.py). A batch that fails at any step is recorded as failed by
`Stages.fail` and the pipeline goes on with the next one.

Batches grow from FIRST_BATCH_FILES files, doubling up to `batch_size`: the model starts on
the first few parsed files, and a big folder runs as few task runs. Embedded batches wait
and are written together, in one commit, once enough chunks, bytes or seconds have gathered
(`CommitSettings`): a commit's cost grows little with its size, and each document is still
replaced whole in one commit.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import numpy as np

from tasks.core.options import Settings, option
from tasks.core.records import Chunk, Document, SourceFile
from tasks.text.split import SplitResult

T = TypeVar("T", covariant=True)

LOAD_AHEAD = 2  # batches loaded ahead of those being embedded
# The first batch holds at most this many files and MiB, the next twice as many, and so on up
# to batch_size and batch_mb: the model starts on the first few parsed files instead of
# waiting for a whole batch to parse (the other batches parse meanwhile). The byte limit
# matters for slow formats: four PDFs of a few hundred KiB took 17 s to parse before the
# first forward pass (benchmarks/RESULTS.md, "The default dual model's cost").
FIRST_BATCH_FILES = 4
FIRST_BATCH_MB = 0.25


class BatchSettings(Settings):
    """How the files to index are cut into batches (one task run per step per batch)."""

    batch_size: int = option(
        256, "at most this many files per batch (the first ones hold 4, 8, 16, ...)", ge=1
    )
    batch_mb: float = option(
        4.0,
        "at most this many MiB of files per batch (the first ones 0.25, 0.5, 1, ...); a larger "
        "file is a batch of its own",
        gt=0,
    )


class CommitSettings(Settings):
    """When embedded batches are written: together, in one commit, once any limit is reached
    (and at the end of the run)."""

    commit_chunks: int = option(8_000, "commit once this many chunks wait to be written", ge=1)
    commit_mb: float = option(
        32.0, "commit once the waiting chunks' texts and vectors take this many MiB", gt=0
    )
    commit_seconds: float = option(
        30.0, "commit once this many seconds passed since the last commit", ge=0
    )


EVERY_BATCH = CommitSettings(commit_chunks=1, commit_mb=1e-9, commit_seconds=0)


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
    first batch of at most FIRST_BATCH_FILES files and FIRST_BATCH_MB MiB, each next one up
    to twice as many of each.

    The byte limit keeps batches of big files small: one batch's chunks are in memory at
    once. The first embed waits for the first batch's parse, hence its smaller size.
    """
    parts: list[list[SourceFile]] = []
    held = 0
    for source in files:
        doublings = min(max(len(parts) - 1, 0), 30)
        limit = min(settings.batch_size, FIRST_BATCH_FILES << doublings)
        max_bytes = min(settings.batch_mb, FIRST_BATCH_MB * 2**doublings) * 2**20
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
    cached: int = 0  # distinct texts whose vectors the embed step's cache gave: no model run


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
        self,
        batches: Sequence[Batch],
        documents: list[Document],
        chunks: list[Chunk],
        vectors: np.ndarray,
    ) -> None:
        """Commit embedded batches to the dataset, together: their documents, chunks and
        vectors in batch order."""
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
    ends_commit: bool = False  # the last batch of the commit that wrote it

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
    commits: CommitSettings = EVERY_BATCH,
) -> Iterator[BatchOutcome]:
    """Run every batch through load → split → embed → write, yielding each batch's outcome.

    Loads are submitted up to `in_flight + load_ahead` batches ahead of the batch being
    split, once the first batch has loaded; up to `in_flight` embeds run at once; embedded
    batches wait here and are written together once `commits` says so, in batch order, so the
    dataset commits them in the order of the plan. A batch's outcome comes once it is written
    or has failed (a failed batch can come before batches still waiting for their commit).
    `clock` times the waits and the steps that run here (stages "load (waiting)", "split",
    "embed", "write").
    """
    loads: dict[int, Future[list[Document]]] = {}
    submitted = 0  # batches[:submitted] have had their load submitted

    def load_until(end: int) -> None:
        nonlocal submitted
        for ahead in batches[submitted:end]:
            loads[ahead.number] = stages.load(ahead)
        submitted = max(submitted, end)

    embedding: deque[_InFlight] = deque()
    waiting = _Waiting(commits)
    window = in_flight + load_ahead
    for index, batch in enumerate(batches):
        # The first batch loads alone: the model waits for it, and batches loading beside it
        # would share the parsers with it (a later batch of PDFs took the one parser first
        # and held the first forward pass back by seconds).
        load_until(index + (window if index else 1))
        try:
            with clock.timed("load (waiting)"):
                documents = loads.pop(batch.number).result()
            load_until(index + window)  # loaded: the next ones may start
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
            yield from _embedded(embedding.popleft(), waiting, stages, clock)
    while embedding:
        yield from _embedded(embedding.popleft(), waiting, stages, clock)
    yield from _commit(waiting, stages, clock)


@dataclass
class _Waiting:
    """Embedded batches waiting for their commit, and when the last commit was."""

    settings: CommitSettings
    batches: list[tuple[_InFlight, Vectors]] = field(default_factory=list)
    chunks: int = 0
    bytes: int = 0
    since: float = field(default_factory=time.monotonic)
    now: Callable[[], float] = time.monotonic

    def add(self, flight: _InFlight, vectors: Vectors) -> None:
        self.batches.append((flight, vectors))
        self.chunks += len(flight.chunks)
        self.bytes += vectors.vectors.nbytes + sum(len(chunk.text) for chunk in flight.chunks)

    def due(self) -> bool:
        return (
            self.chunks >= self.settings.commit_chunks
            or self.bytes >= self.settings.commit_mb * 2**20
            or self.now() - self.since >= self.settings.commit_seconds
        )

    def take(self) -> list[tuple[_InFlight, Vectors]]:
        taken, self.batches = self.batches, []
        self.chunks = self.bytes = 0
        self.since = self.now()
        return taken


def _embedded(
    flight: _InFlight, waiting: _Waiting, stages: Stages, clock: StageClock
) -> Iterator[BatchOutcome]:
    """Wait for a batch's vectors and add it to the waiting batches (a failure stays with
    this batch); commit them if due."""
    try:
        with clock.timed("embed"):
            vectors = flight.vectors.result()
    except Exception as exc:  # noqa: BLE001 - the batch failed after its retries
        yield BatchOutcome(flight.batch, stages.fail(flight.batch, exc), error=exc)
        return
    waiting.add(flight, vectors)
    if waiting.due():
        yield from _commit(waiting, stages, clock)


def _commit(waiting: _Waiting, stages: Stages, clock: StageClock) -> Iterator[BatchOutcome]:
    """Write the waiting batches in one commit; if it fails, each of them failed."""
    group = waiting.take()
    if not group:
        return
    try:
        with clock.timed("write"):
            stages.write(
                [flight.batch for flight, _ in group],
                [doc for flight, _ in group for doc in flight.documents],
                [chunk for flight, _ in group for chunk in flight.chunks],
                np.concatenate([vectors.vectors for _, vectors in group]),
            )
    except Exception as exc:  # noqa: BLE001 - the commit failed after its retries
        for flight, _ in group:
            yield BatchOutcome(flight.batch, stages.fail(flight.batch, exc), error=exc)
        return
    for n, (flight, vectors) in enumerate(group, start=1):
        yield BatchOutcome(
            flight.batch, flight.documents, flight.splits, vectors, ends_commit=n == len(group)
        )


def batches_label(batches: Sequence[Batch]) -> str:
    """'[batch 3/9]' for one batch, '[batches 3-5/9]' for a run of them."""
    first, last = batches[0], batches[-1]
    if first is last:
        return first.label
    return f"[batches {first.number}-{last.number}/{first.total}]"


@dataclass(frozen=True)
class Done(Future[T]):
    """A future that is already resolved."""

    value: T

    def result(self) -> T:
        return self.value
