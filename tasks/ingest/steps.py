"""The ingest steps as Prefect tasks: thin wrappers that add retries, caching and run names.

Each task wraps a plain function of the layers below. load, split and embed are cached by
content (tasks/ingest/cache_keys.py) and keep their results on disk only: by default Prefect
keeps a flow run's last 1,000 cache-keyed results in memory, i.e. the documents, chunks and
vectors of up to 1,000 batches. The write step has no cache: a cached write could claim rows
that are not in the table (e.g. after the dataset folder was deleted); writes are
idempotent instead.

The documents and chunks handed to split and write (which run in the flow process) go
through `unwalked`: Prefect would otherwise walk every block and chunk of them looking for
futures, for each task run (most of a run's time without a model); the cache keys still see
their content. Submitted tasks get plain arguments (flat lists of files and texts): a Dask
runner rebuilds the arguments it is handed, and files inside a `quote` reached its workers as
tuples (tests/test_dask.py).

`TaskStages` plugs these tasks into the batch pipeline (tasks/ingest/pipeline.py) for one
run on one open dataset. It holds the run's `FirstPassClock` and hands it to the embeds; the
loads use their process's parser pool (tasks/ingest/load.py, `process_parsers`), which
`TaskStages` makes for the run's model unless the warm-up has.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar, cast

import numpy as np
import psutil
from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.utilities.annotations import quote

from tasks.core import faults
from tasks.core.artifacts import Logger
from tasks.core.memory import release_free_memory
from tasks.core.prefect_compat import unlink_results
from tasks.core.reasons import Reason
from tasks.core.records import Chunk, Document, SourceFile
from tasks.dataset.dataset import Dataset
from tasks.embed.models import get_embedder, model_info, token_counter
from tasks.ingest.cache_keys import every_reader, model_code, step_cache
from tasks.ingest.discover import plan_run
from tasks.ingest.load import LoadSettings, load_batch, process_parsers
from tasks.ingest.pipeline import Batch, Done, Future, Vectors, batches_label
from tasks.ingest.reuse import assemble, keyed_by_input, texts_to_embed
from tasks.text.semantic_split import split_documents_semantic
from tasks.text.split import SplitResult, SplitSettings, split_documents

T = TypeVar("T")
ListT = TypeVar("ListT", bound=list[Any])


def unwalked(value: T) -> T:
    """`value` as a task argument that Prefect passes on without walking it for futures
    (`quote`); typed as the value itself."""
    return cast(T, quote(value))


def split_batch(
    documents: list[Document], settings: SplitSettings, model: str
) -> list[SplitResult]:
    """Chunk loaded documents to fit `model`'s token window, counting with its tokenizer; the
    semantic splitter embeds sentences with `model` itself (loaded once per process)."""
    info = model_info(model)
    window = info.max_tokens
    if settings.splitter == "semantic":
        encode = get_embedder(model).encode

        def embed(texts: list[str]) -> np.ndarray:  # the first vector alone: one model's
            return encode(texts)[:, : info.dimension]

        results = split_documents_semantic(documents, settings, token_counter(model), window, embed)
    else:
        results = split_documents(documents, settings, token_counter(model), window)
    if not info.headings:
        return results
    return [replace(r, chunks=keyed_by_input(r.chunks, info.headings)) for r in results]


class FirstPassClock:
    """When a run's first forward pass began, as the run's summary reports it (seconds after
    the process started: benchmarks/ingest.py reads it there). The run's `TaskStages` holds
    one and hands it to each embed; an embed in a Dask worker marks that worker's copy, so a
    run embedded there reports none."""

    def __init__(self) -> None:
        self._began: float | None = None  # epoch seconds of the first mark

    def mark(self) -> None:
        """A forward pass begins now; only the first mark counts (two embeds marking at once
        differ by microseconds)."""
        if self._began is None:
            self._began = time.time()

    def first_forward_pass(self) -> float | None:
        """Seconds from this process's start to the first forward pass; None if there was
        none here (nothing to embed, every result cached, or the embeds ran in Dask
        workers)."""
        if self._began is None:
            return None
        return self._began - psutil.Process().create_time()


def embed_texts(texts: list[str], model: str, clock: FirstPassClock | None = None) -> np.ndarray:
    """Unit vectors of `texts` by `model` (loaded once per process, on first use); `clock`
    is marked as the model starts on them."""
    faults.maybe_fail("embed")
    faults.maybe_crash("embed")
    embedder = get_embedder(model)
    if texts and clock is not None:
        clock.mark()
    return embedder.encode(texts)


# The cached steps' keys: their inputs' content and the code of the function's module, of what
# it loads by name (every reader; the model's backends) and of all that these import.
# Which parsers and when, and the clock, change no result: no part of the keys.
LOAD_CACHE = step_cache("load", load_batch, every_reader, ignored=("priority", "parsers"))
SPLIT_CACHE = step_cache("split", split_batch, model_code)
EMBED_CACHE = step_cache("embed", embed_texts, model_code, ignored=("clock",))

# The cached steps: retried, keyed by content, results kept on disk only (see module doc).
plan_task = task(name="plan", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 5])(
    plan_run
)
load_task = task(
    name="load",
    cache_policy=LOAD_CACHE,
    persist_result=True,
    cache_result_in_memory=False,
    retries=2,
    retry_delay_seconds=[1, 5],
)(load_batch)
split_task = task(
    name="split",
    cache_policy=SPLIT_CACHE,
    persist_result=True,
    cache_result_in_memory=False,
    retries=1,
)(split_batch)
embed_task = task(
    name="embed",
    cache_policy=EMBED_CACHE,
    persist_result=True,
    cache_result_in_memory=False,
    retries=2,
    retry_delay_seconds=[2, 10],
)(embed_texts)


def write_batch(
    dataset: Dataset, documents: list[Document], chunks: list[Chunk], vectors: np.ndarray
) -> None:
    dataset.write_batch(documents, chunks, vectors)


def delete_documents(dataset: Dataset, doc_ids: list[str]) -> int:
    return dataset.delete(doc_ids)


def finalize_dataset(dataset: Dataset, run_tag: str) -> int:
    return dataset.finalize(run_tag)


# The steps that change the dataset: retried, never cached (writes are idempotent instead).
write_task = task(name="write", cache_policy=NO_CACHE, retries=3, retry_delay_seconds=[1, 5, 15])(
    write_batch
)
delete_task = task(name="delete", cache_policy=NO_CACHE, retries=3, retry_delay_seconds=[1, 5, 15])(
    delete_documents
)
finalize_task = task(
    name="finalize", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[2, 10]
)(finalize_dataset)


@dataclass
class _OfThisScan(Future[list[Document]]):
    """The loaded documents with this run's facts about their files. The load cache is keyed
    by a file's doc_id and bytes, so a cached document may come from a copy of the file
    elsewhere (another path, another mtime); the ledger must record the file scanned now."""

    loaded: Future[list[Document]]
    files: Sequence[SourceFile]

    def result(self) -> list[Document]:
        scanned = {source.doc_id: source for source in self.files}
        loaded = forget_links(self.loaded.result())
        return [replace(doc, source=scanned.get(doc.doc_id, doc.source)) for doc in loaded]


def forget_links(result: ListT) -> ListT:
    """`result`, a task's returned list, no longer linked to its task run by the flow run
    (`prefect_compat.unlink_results`: the links are never read, and cost memory per file)."""
    unlink_results(result)
    return result


@dataclass
class _Assembled(Future[Vectors]):
    """The batch's vectors once the model's future resolves: stored ones plus new ones."""

    chunks: list[Chunk]
    stored: dict[str, np.ndarray]
    hashes: list[str]
    new: Future[np.ndarray]
    dimension: int

    def result(self) -> Vectors:
        embedded = dict(zip(self.hashes, self.new.result(), strict=True))
        vectors = assemble(self.chunks, self.stored, embedded, self.dimension)
        if served_from_cache(self.new):  # a finished run's vectors: this run embedded none
            return replace(vectors, embedded=0, cached=vectors.embedded)
        return vectors


def served_from_cache(future: object) -> bool:
    """Whether Prefect answered the task run of `future` from its cache (its `Cached` state:
    the result of an earlier run with the same key, the task's function not run)."""
    state = getattr(future, "state", None)
    return state is not None and state.name == "Cached"


@dataclass
class TaskStages:
    """The pipeline's stages for one run: Prefect tasks on one open dataset."""

    dataset: Dataset
    model: str
    load_settings: LoadSettings
    split_settings: SplitSettings
    logger: Logger
    clock: FirstPassClock = field(default_factory=FirstPassClock)

    def __post_init__(self) -> None:
        # This process's parser pool (the thread runner's loads), made for the run's model
        # before the first load, unless the warm-up made it already.
        process_parsers(model_info(self.model).busy_cores)

    def load(self, batch: Batch) -> Future[list[Document]]:
        run = load_task.with_options(task_run_name=f"load{batch.label}")
        submitted = run.submit(list(batch.files), self.load_settings, priority=batch.number)
        return _OfThisScan(submitted, batch.files)

    def split(self, batch: Batch, documents: list[Document]) -> list[SplitResult]:
        run = split_task.with_options(task_run_name=f"split{batch.label}")
        return forget_links(run(unwalked(documents), self.split_settings, self.model))

    def embed(self, batch: Batch, chunks: list[Chunk]) -> Future[Vectors]:
        """Look up stored vectors here, submit only the new texts to the model."""
        dimension = self.dataset.fingerprint.width  # the model's vectors, both parts
        stored = self.dataset.stored_vectors([chunk.text_hash for chunk in chunks])
        todo = texts_to_embed(chunks, stored, model_info(self.model).headings)
        if not todo:
            return Done(assemble(chunks, stored, {}, dimension))
        run = embed_task.with_options(task_run_name=f"embed{batch.label}")
        new = run.submit(list(todo.values()), self.model, clock=self.clock)
        return _Assembled(chunks, stored, list(todo), new, dimension)

    def write(
        self,
        batches: Sequence[Batch],
        documents: list[Document],
        chunks: list[Chunk],
        vectors: np.ndarray,
    ) -> None:
        label = batches_label(batches)
        write_task.with_options(task_run_name=f"write{label}")(
            self.dataset, unwalked(documents), unwalked(chunks), unwalked(vectors)
        )
        release_free_memory()  # or the process keeps every batch's freed buffers
        self.logger.info("%s %d documents, %d chunks written", label, len(documents), len(chunks))

    def fail(self, batch: Batch, error: Exception) -> list[Document]:
        """Mark a failed batch's files failed in the ledger; their old chunks stay."""
        self.logger.error(
            "%s failed after retries: %s: %s", batch.label, type(error).__name__, error
        )
        message = f"{type(error).__name__}: {error}"
        failed = [Document.not_indexed(s, Reason.BATCH_FAILED, message) for s in batch.files]
        try:
            self.dataset.record_failed(failed)
        except Exception as exc:  # noqa: BLE001 - the next run retries these files anyway
            self.logger.error("could not record the failed batch in the ledger: %s", exc)
        return failed
