"""Ingest flow: keep a LanceDB index of a folder of documents fresh.

    python -m flows.ingest DIR [--index URI] [--batch-size N] [--batch-mb MB] [--model NAME]
                               [--rebuild]
                               [--task-runner threads|dask [--dask-address tcp://HOST:PORT]]

discover → plan (diff against the ledger) → for each batch of files: load → split → embed →
write (one commit per batch) → delete vanished documents → finalize (indexes, compaction).

Exit status: 0 when every file ended indexed, empty or unchanged; 2 when the run completed but
some files failed (listed in the summary with their reasons); 1 when the run itself failed.
The Prefect flow run says the same: Completed with the message "N file(s) failed" or "no file
failed", or Failed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from prefect import flow, get_run_logger
from prefect.futures import PrefectFuture
from prefect.states import Completed

from flows.runners import TASK_RUNNERS, make_task_runner, parallel_batches
from tasks.discover import DEFAULT_EXCLUDE, DiscoverSettings, discover_task, plan_task
from tasks.embed import DEFAULT_MODEL, EmbedResult, embed_task, get_embedder
from tasks.load import LoadSettings, load_task
from tasks.memory import release_free_memory
from tasks.records import EMPTY, FAILED, INDEXED, Chunk, Document, SourceFile
from tasks.report import RunProgress, publish_summary, terminal_progress
from tasks.schema import fingerprint, fingerprint_id
from tasks.split import SplitResult, SplitSettings, split_task
from tasks.store import (
    DEFAULT_INDEX_URI,
    DatasetError,
    dataset_lock,
    delete_task,
    finalize_task,
    prepare_dataset,
    read_ledger,
    write_documents,
    write_task,
)

LOAD_AHEAD = 2  # batches loaded ahead of those being embedded
BATCH_FILES = 32  # default most files per batch
BATCH_MB = 4.0  # default most MiB of files per batch (1 measured slower on HTML)


@dataclass
class IngestSummary:
    """What one ingest run did, for the terminal and the flow's return value."""

    index_uri: str
    files_seen: int = 0
    unchanged: int = 0
    indexed: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (doc_id, reason: message)
    empties: list[tuple[str, str]] = field(default_factory=list)  # (doc_id, reason: message)
    removed: int = 0
    kept_unseen: int = 0  # not seen, but under a folder that could not be listed
    chunks_written: int = 0
    chunks_embedded: int = 0
    chunks_reused: int = 0
    chunks_deleted: int = 0
    chunks_refit: int = 0
    chunks_truncated: int = 0
    max_tokens: int = 0
    table_version: int = 0
    run_tag: str = ""
    seconds: float = 0.0
    stage_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def empty(self) -> int:
        return len(self.empties)

    @property
    def files_done(self) -> int:
        """Files of this run's batches that ended indexed, empty or failed, for progress."""
        return self.indexed + self.empty + len(self.failed)

    def add_documents(self, documents: list[Document]) -> None:
        """Count the outcome of a batch's documents."""
        self.failed += [(d.doc_id, d.error or "unknown") for d in documents if d.status == FAILED]
        self.indexed += sum(doc.status == INDEXED for doc in documents)
        self.empties += [(d.doc_id, d.error or "") for d in documents if d.status == EMPTY]

    def add_chunks(self, splits: list[SplitResult], embedded: EmbedResult) -> None:
        """Count the chunks a batch wrote."""
        self.chunks_written += len(embedded.vectors)
        self.chunks_embedded += embedded.embedded
        self.chunks_reused += embedded.reused
        self.chunks_refit += sum(result.refit for result in splits)
        self.chunks_truncated += sum(result.over_window for result in splits)

    def render(self) -> str:
        stages = ", ".join(f"{name} {secs:.1f}" for name, secs in self.stage_seconds.items())
        embed_seconds = self.stage_seconds.get("embed", 0)
        rate = self.chunks_embedded / embed_seconds if embed_seconds else 0
        lines = [
            f"index: {self.index_uri} (chunks table version {self.table_version}, "
            f"tag {self.run_tag})",
            f"files: {self.files_seen} seen, {self.indexed} indexed, {self.unchanged} unchanged, "
            f"{self.empty} empty, {len(self.failed)} failed, {self.removed} removed",
            f"chunks: {self.chunks_written} written ({self.chunks_embedded} embedded, "
            f"{self.chunks_reused} reused), {self.chunks_deleted} deleted, "
            f"{self.chunks_refit} re-split to fit the {self.max_tokens}-token window, "
            f"{self.chunks_truncated} would be truncated",
            f"time: {self.seconds:.1f} s ({stages}); embed {rate:.1f} chunks/s",
        ]
        lines += [f"failed: {doc_id}: {error}" for doc_id, error in self.failed]
        lines += [f"empty: {doc_id}: {reason}" for doc_id, reason in self.empties]
        return "\n".join(lines)


def file_batches(
    files: Sequence[SourceFile], size: int, max_bytes: int
) -> list[tuple[str, list[SourceFile]]]:
    """The files in batches of at most `size` files and `max_bytes` bytes (a larger file is a
    batch of its own), each with its label for task run names and logs.

    The byte limit keeps batches of big files small: one batch's chunks are in memory at
    once, and the first embed waits for the first batch's parse.
    """
    parts: list[list[SourceFile]] = []
    held = 0
    for source in files:
        if not parts or len(parts[-1]) >= size or held + source.size > max_bytes:
            parts.append([])
            held = 0
        parts[-1].append(source)
        held += source.size
    return [(f"[batch {n}/{len(parts)}]", part) for n, part in enumerate(parts, start=1)]


@dataclass
class _Pending:
    """A batch whose embedding was submitted to the task runner, waiting to be written."""

    label: str
    files: list[SourceFile]
    documents: list[Document]
    splits: list[SplitResult]
    chunks: list[Chunk]
    embedding: PrefectFuture


def _write_batch(batch: _Pending, index_uri: str, fp: dict, summary: IngestSummary) -> None:
    """Wait for a batch's vectors, write it (one commit) and count it; a failure stays local."""
    stages = summary.stage_seconds
    try:
        with _timed(stages, "embed"):
            embedded = batch.embedding.result()
        with _timed(stages, "write"):
            write_run = write_task.with_options(task_run_name=f"write{batch.label}")
            write_run(index_uri, batch.documents, batch.chunks, embedded.vectors, fp)
    except Exception as exc:  # noqa: BLE001 - the batch failed after its retries
        summary.add_documents(_record_batch_failure(index_uri, batch.label, batch.files, exc, fp))
        return
    summary.add_documents(batch.documents)
    summary.add_chunks(batch.splits, embedded)
    release_free_memory()  # or the process keeps every batch's freed buffers
    get_run_logger().info(
        "%s %d documents, %d chunks written", batch.label, len(batch.documents), len(batch.chunks)
    )


def _record_batch_failure(
    index_uri: str, label: str, batch: Sequence[SourceFile], exc: Exception, fp: dict
) -> list[Document]:
    """Mark a failed batch's documents failed in the ledger; their old chunks stay searchable."""
    logger = get_run_logger()
    logger.error("%s failed after retries: %s: %s", label, type(exc).__name__, exc)
    error = f"batch_failed: {type(exc).__name__}: {exc}"
    failed = [Document.failed(source, error) for source in batch]
    try:
        write_documents(index_uri, failed, [], np.zeros((0, fp["dimension"]), np.float32), fp)
    except Exception as ledger_exc:  # noqa: BLE001 - the next run retries these files anyway
        logger.error("could not record the failed batch in the ledger: %s", ledger_exc)
    return failed


@contextmanager
def _timed(stages: dict[str, float], name: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        stages[name] = stages.get(name, 0.0) + time.perf_counter() - start


@flow(name="ingest")
def ingest(
    source_dir: str,
    index_uri: str = DEFAULT_INDEX_URI,
    model: str = DEFAULT_MODEL,
    batch_size: int = BATCH_FILES,
    batch_mb: float = BATCH_MB,
    chunk_size: int = SplitSettings.chunk_size,
    chunk_overlap: int = SplitSettings.chunk_overlap,
    rebuild: bool = False,
    lock_timeout: float = 3600.0,
    max_file_mb: float = LoadSettings.max_file_bytes / 2**20,
    parse_timeout: float = LoadSettings.parse_timeout,
    include: list[str] | None = None,
    exclude: list[str] | None = None,
) -> IngestSummary:
    """Index new and changed documents under `source_dir`, drop vanished ones.

    Files are processed in batches of up to `batch_size` files and `batch_mb` MiB.
    Runs on one dataset never overlap: a second run waits up to `lock_timeout` seconds.
    Files larger than `max_file_mb` or parsing longer than `parse_timeout` seconds fail with
    that reason; `include` globs restrict the files (paths relative to `source_dir`), `exclude`
    globs add to the default exclusions (hidden files and folders, editor temp files).
    The run ends Completed even when some files failed; its state message says how many.
    """
    logger = get_run_logger()
    started = time.perf_counter()
    summary = IngestSummary(index_uri=index_uri)
    stages = summary.stage_seconds
    settings = SplitSettings(chunk_size, chunk_overlap)
    load_settings = LoadSettings(int(max_file_mb * 2**20), parse_timeout)
    scan_settings = DiscoverSettings(tuple(include or ()), DEFAULT_EXCLUDE + tuple(exclude or ()))

    with _timed(stages, "model"):
        embedder = get_embedder(model)
    fp = fingerprint(embedder.model_id, embedder.dimension, embedder.max_tokens, settings)
    summary.max_tokens = embedder.max_tokens

    with dataset_lock(index_uri, lock_timeout, logger):
        prepare_dataset(index_uri, fp, rebuild)
        with _timed(stages, "discover"):
            ledger = read_ledger(index_uri)
            scan = discover_task(source_dir, ledger, scan_settings)
            plan = plan_task(scan, ledger, fingerprint_id(fp))
        summary.files_seen, summary.unchanged = len(scan.files), len(plan.unchanged)
        summary.kept_unseen = len(plan.kept_unseen)
        logger.info(
            "%d files: %d to index, %d unchanged, %d removed; unreadable folders: %s",
            len(scan.files),
            len(plan.to_index),
            len(plan.unchanged),
            len(plan.removed),
            ", ".join(scan.unreadable_dirs) or "none",
        )

        batches = file_batches(plan.to_index, batch_size, int(batch_mb * 2**20))
        progress = RunProgress(len(plan.to_index), logger)
        # Loads run ahead of the batch being split, and embeds run in the task runner (one
        # batch at a time in this process's threads, one per worker thread on Dask), so
        # parsing, embedding and writing overlap. Writes happen here, in batch order.
        parallel = parallel_batches()
        loads: dict[int, PrefectFuture] = {}
        embedding: deque[_Pending] = deque()
        for index, (label, files) in enumerate(batches):
            for ahead in range(index, min(index + parallel + LOAD_AHEAD, len(batches))):
                if ahead not in loads:
                    load_run = load_task.with_options(task_run_name=f"load{batches[ahead][0]}")
                    loads[ahead] = load_run.submit(list(batches[ahead][1]), load_settings)
            try:
                with _timed(stages, "load (waiting)"):
                    documents = loads.pop(index).result()
                with _timed(stages, "split"):
                    split_run = split_task.with_options(task_run_name=f"split{label}")
                    splits = split_run(documents, settings, model)
                chunks = [chunk for result in splits for chunk in result.chunks]
                embed_run = embed_task.with_options(task_run_name=f"embed{label}")
                future = embed_run.submit(chunks, model, index_uri)
            except Exception as exc:  # noqa: BLE001 - the batch failed after its retries
                summary.add_documents(_record_batch_failure(index_uri, label, files, exc, fp))
                progress.update(summary)
                continue
            embedding.append(_Pending(label, files, documents, splits, chunks, future))
            while len(embedding) >= parallel:
                _write_batch(embedding.popleft(), index_uri, fp, summary)
                progress.update(summary)
        while embedding:
            _write_batch(embedding.popleft(), index_uri, fp, summary)
            progress.update(summary)

        with _timed(stages, "write"):
            summary.chunks_deleted = delete_task(index_uri, list(plan.removed))
            summary.removed = len(plan.removed)
        with _timed(stages, "finalize"):
            summary.run_tag = f"run-{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}"
            summary.table_version = finalize_task(index_uri, summary.run_tag)

    summary.seconds = time.perf_counter() - started
    logger.info(
        "ingest finished: %d indexed, %d unchanged, %d empty, %d failed, %d removed, "
        "%d chunks written (%d embedded, %d reused) in %.1f s; tagged %s",
        summary.indexed,
        summary.unchanged,
        summary.empty,
        len(summary.failed),
        summary.removed,
        summary.chunks_written,
        summary.chunks_embedded,
        summary.chunks_reused,
        summary.seconds,
        summary.run_tag,
    )
    publish_summary(summary, logger)
    outcome = f"{len(summary.failed)} file(s) failed" if summary.failed else "no file failed"
    return Completed(message=outcome, data=summary)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m flows.ingest", description=__doc__.split("\n")[0]
    )
    parser.add_argument("source_dir", help="folder of .md/.html/.pdf/.txt documents to index")
    parser.add_argument(
        "--index", default=DEFAULT_INDEX_URI, help="LanceDB dataset URI (default: %(default)s)"
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=BATCH_FILES,
        help="at most this many files per batch (default: %(default)s)",
    )
    parser.add_argument(
        "--batch-mb",
        type=float,
        default=BATCH_MB,
        help="at most this many MiB of files per batch; a larger file is a batch of its own "
        "(default: %(default)g)",
    )
    parser.add_argument(
        "--model", default=DEFAULT_MODEL, help="embedding model name or path, or 'hash' (tests)"
    )
    parser.add_argument(
        "--chunk-size", type=int, default=SplitSettings.chunk_size, help="characters per chunk"
    )
    parser.add_argument(
        "--chunk-overlap",
        type=int,
        default=SplitSettings.chunk_overlap,
        help="characters of overlap",
    )
    parser.add_argument(
        "--rebuild",
        action="store_true",
        help="drop the dataset's tables and index everything again",
    )
    parser.add_argument(
        "--max-file-mb",
        type=float,
        default=LoadSettings.max_file_bytes / 2**20,
        help="larger files fail as too_large (default: %(default)g)",
    )
    parser.add_argument(
        "--parse-timeout",
        type=float,
        default=LoadSettings.parse_timeout,
        help="seconds one file may take to parse; 0 = no limit, in-process (default: %(default)g)",
    )
    parser.add_argument(
        "--include", action="append", metavar="GLOB", help="only paths matching (repeatable)"
    )
    parser.add_argument(
        "--exclude",
        action="append",
        metavar="GLOB",
        help="also skip file/folder names matching (repeatable); hidden and temp files always are",
    )
    parser.add_argument(
        "--task-runner",
        choices=TASK_RUNNERS,
        default="threads",
        help="where tasks run: threads in this process, or a Dask cluster (default: %(default)s)",
    )
    parser.add_argument(
        "--dask-address",
        metavar="tcp://HOST:PORT",
        help="a running Dask scheduler; without it, --task-runner dask starts a local cluster",
    )
    args = parser.parse_args(argv)
    if args.dask_address and args.task_runner != "dask":
        parser.error("--dask-address needs --task-runner dask")
    if not Path(args.source_dir).is_dir():
        parser.error(f"source folder not found: {args.source_dir}")
    if args.batch_size < 1:
        parser.error("--batch-size must be at least 1")
    if args.batch_mb <= 0:
        parser.error("--batch-mb must be positive")
    try:
        SplitSettings(args.chunk_size, args.chunk_overlap)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    flow_run = ingest.with_options(
        task_runner=make_task_runner(args.task_runner, args.dask_address)
    )
    try:
        with terminal_progress():  # a progress bar when a person watches the run
            summary = flow_run(
                source_dir=str(Path(args.source_dir).resolve()),
                index_uri=args.index,
                model=args.model,
                batch_size=args.batch_size,
                batch_mb=args.batch_mb,
                chunk_size=args.chunk_size,
                chunk_overlap=args.chunk_overlap,
                rebuild=args.rebuild,
                max_file_mb=args.max_file_mb,
                parse_timeout=args.parse_timeout,
                include=args.include,
                exclude=args.exclude,
            )
    except DatasetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - Prefect has logged the traceback
        print(f"error: the ingest run failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(summary.render())
    return 2 if summary.failed else 0


if __name__ == "__main__":
    sys.exit(main())
