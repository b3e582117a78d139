"""Parse files in separate processes, so that one pathological file cannot stall a run.

Each long-lived worker process (`python -m tasks.ingest.parse_worker`, sharing no threads or
model state with the caller) loads one document at a time; requests and results travel as
pickles over its stdin and a private copy of its stdout (whatever the parsers print goes to
stderr). If a file takes longer than the timeout, the worker is killed, the file is recorded
as failed (`parse_timeout`), and a fresh worker starts with the next file. A worker that dies
(a crash in a native parser) costs only the file it was on.

`PARSERS` is the process's pool of such workers, one per two cores by default
($DOC_INDEXER_PARSE_WORKERS): the files of a batch are parsed in parallel, each by the next
idle worker, and batches loaded at the same time share the pool (see `ParserPool` for when
the workers after the first join).
"""

from __future__ import annotations

import os
import pickle
import queue
import select
import subprocess
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tasks.core.cores import usable_cores, workers_from_env
from tasks.core.reasons import Reason
from tasks.core.records import Document, SourceFile
from tasks.ingest.parse import ReadOptions, load_document, warm_up

STARTUP_TIMEOUT = 300  # seconds for a fresh worker to import the parsers and load spaCy
# Parsing runs ahead of embedding; at a lower CPU priority it fills the cycles the model leaves
# idle instead of stalling the model's threads, which wait for each other (see README).
NICENESS = 10
_READY = "ready"


class ParseWorker:
    """The worker process and the pipes to it; safe to share between threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            [sys.executable, "-m", "tasks.ingest.parse_worker"],
            cwd=Path(__file__).resolve().parents[2],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._process = process
        if _receive(process, STARTUP_TIMEOUT) != _READY:
            self._stop()
            raise RuntimeError(f"the parser process did not start within {STARTUP_TIMEOUT} s")
        return process

    def _stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            for pipe in (self._process.stdin, self._process.stdout):
                if pipe is not None:
                    pipe.close()
        self._process = None

    def start(self) -> None:
        """Start the worker now (while Prefect starts, say) instead of on the first file."""
        with self._lock:
            if self._process is None:
                self._start()

    def load(self, source: SourceFile, options: ReadOptions, timeout: float) -> Document:
        """The loaded document, or a failed one if the worker overran `timeout` or died."""
        with self._lock:
            process = self._process or self._start()
            try:
                assert process.stdin is not None
                pickle.dump((source, options), process.stdin)
                process.stdin.flush()
                document: Document = _receive(process, timeout)
                return document
            except TimeoutError:
                reason, message = Reason.PARSE_TIMEOUT, f"parsing took longer than {timeout:g} s"
            except (EOFError, OSError, pickle.UnpicklingError) as exc:
                reason = Reason.PARSE_CRASH
                message = f"the parser process died ({type(exc).__name__})"
            self._stop()
            return Document.not_indexed(source, reason, message)


def _receive(process: subprocess.Popen[bytes], timeout: float) -> Any:
    """The next pickle from the worker; TimeoutError if none arrives in time."""
    assert process.stdout is not None
    readable, _, _ = select.select([process.stdout], [], [], timeout)
    if not readable:
        raise TimeoutError
    return pickle.load(process.stdout)


WORKERS_ENV = "DOC_INDEXER_PARSE_WORKERS"


def default_parse_workers(model_busy_cores: bool = True) -> int:
    """Parser processes: $DOC_INDEXER_PARSE_WORKERS, else one per two cores this process may
    use beside a model that keeps the cores busy, one per core beside one that does not (the
    hash embedder). The model shares the cores with the parsers: on two cores a second parser
    made the default model's run of the Rust book 3.7 s slower (benchmarks/RESULTS.md,
    "Scale"), while without a model parsing is what a run waits for."""
    cores = usable_cores()
    return workers_from_env(WORKERS_ENV, max(1, cores // 2) if model_busy_cores else cores)


class ParserPool:
    """Parser processes shared by every thread that loads files: each file goes to the next
    idle worker in service.

    The first worker serves from the start (its process starts on first use, or by `start`).
    The others join once their process has started, one after the other in the background,
    from the first load of several files on: at a run's start the first worker, the model and
    Prefect's server already share the cores, and one more parser starting then delayed the
    first forward pass by seconds (benchmarks/RESULTS.md, "Scale")."""

    def __init__(self, size: int | None = None) -> None:
        self._size = size
        self._model_busy_cores = True  # see `serve_model`
        self._lock = threading.Lock()
        self._workers: list[ParseWorker] = []
        self._idle: queue.SimpleQueue[ParseWorker] = queue.SimpleQueue()
        self._serving = 0  # workers put in service so far
        self._joining = False  # the others are being started

    def serve_model(self, busy_cores: bool) -> None:
        """Size the pool for a run's model (`ModelInfo.busy_cores`), unless its workers are
        made already or its size was given."""
        with self._lock:
            self._model_busy_cores = busy_cores

    def workers(self) -> list[ParseWorker]:
        """The pool's workers, made on the first call; the first one in service at once."""
        with self._lock:
            if not self._workers:
                count = self._size or default_parse_workers(self._model_busy_cores)
                self._workers = [ParseWorker() for _ in range(count)]
                self._idle.put(self._workers[0])
                self._serving = 1
            return self._workers

    def serving(self) -> int:
        """How many workers take files now."""
        self.workers()
        return self._serving

    def start(self) -> None:
        """Start the first worker's process now (the first files wait for it)."""
        self.workers()[0].start()

    def _join_the_others(self) -> None:
        """Start the other workers one by one in the background; each serves once started
        (one that fails to start serves anyway: its first file starts it again, or fails)."""
        with self._lock:
            if self._joining or len(self._workers) < 2:
                return
            self._joining = True

        def join() -> None:
            for worker in self._workers[1:]:
                try:
                    worker.start()
                except RuntimeError:
                    pass  # its first load tries again and records the failure
                with self._lock:
                    self._serving += 1
                self._idle.put(worker)

        threading.Thread(target=join, name="parsers-joining", daemon=True).start()

    def load(self, source: SourceFile, options: ReadOptions, timeout: float) -> Document:
        """One file, by the next idle worker (see `ParseWorker.load`)."""
        self.workers()
        worker = self._idle.get()
        try:
            return worker.load(source, options, timeout)
        finally:
            self._idle.put(worker)

    def load_all(
        self, sources: Sequence[SourceFile], options: ReadOptions, timeout: float
    ) -> list[Document]:
        """The files' documents in order, parsed by as many workers at once as serve."""
        if len(sources) > 1:
            self.workers()
            self._join_the_others()
        parallel = min(self.serving(), len(sources))
        if parallel < 2:
            return [self.load(source, options, timeout) for source in sources]
        with ThreadPoolExecutor(parallel) as threads:
            return list(threads.map(lambda source: self.load(source, options, timeout), sources))


PARSERS = ParserPool()


def _serve() -> None:
    """Worker loop: read a SourceFile and ReadOptions, write back its Document; EOF ends the
    loop."""
    os.nice(NICENESS)
    results = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints must not corrupt results
    warm_up()
    pickle.dump(_READY, results)
    results.flush()
    requests = sys.stdin.buffer
    while True:
        try:
            source, options = pickle.load(requests)
        except EOFError:
            return
        pickle.dump(load_document(source, options), results)
        results.flush()


if __name__ == "__main__":
    _serve()
