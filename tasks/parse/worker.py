# Over 300 lines: the worker process, its pipe protocol and its pool share one timeout story.
"""Parse files in separate processes, so that one pathological file cannot stall a run.

Each long-lived worker process (`python -m tasks.parse.worker`, sharing no threads or
model state with the caller) loads one document at a time; requests and results travel as
pickles over its stdin and a private copy of its stdout (whatever the parsers print goes to
stderr). If a file takes longer than the timeout, the worker is killed, the file is recorded
as failed (`parse_timeout`), and a fresh worker starts with the next file. A worker that dies
(a crash in a native parser) costs only the file it was on.

A `ParserPool` holds such workers, one per two cores by default ($DOC_INDEXER_PARSE_WORKERS):
the files of a batch are parsed in parallel, each by the next idle worker, and batches loaded
at the same time share the pool (see `ParserPool` for when the workers after the first join).
This module keeps no pool: whoever loads files makes one and hands it in (the load step keeps
one per process for its Prefect tasks: tasks/ingest/load.py, `process_parsers`).
"""

from __future__ import annotations

import heapq
import itertools
import os
import pickle
import select
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

from tasks.core.cores import usable_cores, workers_from_env
from tasks.core.reasons import Reason
from tasks.core.records import Document, SourceFile
from tasks.parse.document import ReadOptions, load_document, warm_up

STARTUP_TIMEOUT = 300  # seconds for a fresh worker to import the parsers and load spaCy
# Parsing runs ahead of embedding; at a lower CPU priority it fills the cycles the model leaves
# idle instead of stalling the model's threads, which wait for each other (see README).
NICENESS = 10
# Files sent to a worker before its first result is back: it starts the next file at once
# instead of after a round trip to the parent (about a quarter of a small Markdown note's
# parse: 1,000 notes through one worker took 2.80 s one at a time, 2.14 s two ahead).
AHEAD = 2
# Files a pool's thread loads with one worker before it gives the worker back to the pool.
RUN_FILES = 16
_READY = "ready"
_SIZE_BYTES = 8  # a result's size, before its pickle


class ParseWorker:
    """The worker process and the pipes to it; safe to share between threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            [sys.executable, "-m", "tasks.parse.worker"],
            cwd=Path(__file__).resolve().parents[2],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,  # results are read straight from the pipe (`_receive`)
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
        [(_, document)] = self.load_run(iter([(0, source)]).__next__, options, timeout, 1)
        return document

    def load_run(
        self,
        take: Callable[[], tuple[int, SourceFile]],
        options: ReadOptions,
        timeout: float,
        files: int,
    ) -> list[tuple[int, Document]]:
        """Up to `files` files from `take` (numbered; StopIteration: none left), each loaded
        or failed as by `load`, numbers kept. AHEAD of them are sent before the first result
        comes back, so the process starts each file without waiting for the parent; a file
        it overruns or dies on fails alone, and the ones sent after it go to a fresh
        process."""
        done: list[tuple[int, Document]] = []
        sent: deque[tuple[int, SourceFile]] = deque()
        with self._lock:
            process = self._process or self._start()
            taken = 0
            while True:
                while taken < files and len(sent) < AHEAD:
                    try:
                        item = take()
                    except StopIteration:
                        taken = files
                        break
                    taken += 1
                    sent.append(item)
                    _send(process, item[1], options)  # a dead process shows in _receive
                if not sent:
                    return done
                number, source = sent.popleft()
                try:
                    done.append((number, _receive(process, timeout)))
                    continue
                except TimeoutError:
                    reason = Reason.PARSE_TIMEOUT
                    message = f"parsing took longer than {timeout:g} s"
                except (EOFError, OSError, pickle.UnpicklingError) as exc:
                    reason = Reason.PARSE_CRASH
                    message = f"the parser process died ({type(exc).__name__})"
                done.append((number, Document.not_indexed(source, reason, message)))
                self._stop()
                if sent or taken < files:  # the files sent after it, then the rest
                    process = self._start()
                    for _, later in sent:
                        _send(process, later, options)


def _send(process: subprocess.Popen[bytes], source: SourceFile, options: ReadOptions) -> None:
    """A request to the worker; a worker that died is left for `_receive` to find."""
    assert process.stdin is not None
    request = memoryview(pickle.dumps((source, options)))
    try:
        while request:  # the pipe is unbuffered: a write may take part of it
            request = request[process.stdin.write(request) or 0 :]
    except OSError:  # a broken pipe: the process is gone, and its next result is EOF
        pass


def _receive(process: subprocess.Popen[bytes], timeout: float) -> Any:
    """The next result from the worker (`_reply`: its size, then its pickle); TimeoutError
    if it is not all there in time, EOFError if the worker is gone. Read straight from the
    pipe: with results sent ahead, a buffered reader could hold the next one where `select`
    cannot see it."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    deadline = time.monotonic() + timeout
    size = int.from_bytes(_read_exactly(fd, _SIZE_BYTES, deadline), "little")
    return pickle.loads(_read_exactly(fd, size, deadline))


def _read_exactly(fd: int, size: int, deadline: float) -> bytes:
    """`size` bytes from the pipe `fd` by `deadline` (TimeoutError), or EOFError."""
    parts: list[bytes] = []
    missing = size
    while missing:
        readable, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not readable:
            raise TimeoutError
        part = os.read(fd, missing)
        if not part:
            raise EOFError
        parts.append(part)
        missing -= len(part)
    return b"".join(parts)


def _reply(results: BinaryIO, value: Any) -> None:
    """One result for `_receive`: its size, then its pickle."""
    data = pickle.dumps(value)
    results.write(len(data).to_bytes(_SIZE_BYTES, "little") + data)
    results.flush()


WORKERS_ENV = "DOC_INDEXER_PARSE_WORKERS"


def default_parse_workers(model_busy_cores: bool = True) -> int:
    """Parser processes: $DOC_INDEXER_PARSE_WORKERS, else one per two cores this process may
    use beside a model that keeps the cores busy, one per core beside one that does not (the
    hash embedder). The model shares the cores with the parsers: on two cores a second parser
    made the default model's run of the Rust book 3.7 s slower (benchmarks/RESULTS.md,
    "Scale"), while without a model parsing is what a run waits for."""
    cores = usable_cores()
    return workers_from_env(WORKERS_ENV, max(1, cores // 2) if model_busy_cores else cores)


class IdleWorkers:
    """The pool's idle workers, handed to the waiting loads lowest `priority` first (then in
    the order they asked): batches load side by side, and the first batch's files must not
    wait behind a later batch's (a later batch of PDFs parsed first delayed the first forward
    pass by seconds: benchmarks/RESULTS.md, "The default dual model's cost")."""

    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._workers: list[ParseWorker] = []
        self._waiting: list[tuple[int, int]] = []  # a heap of (priority, ticket)
        self._tickets = itertools.count()

    def put(self, worker: ParseWorker) -> None:
        with self._ready:
            self._workers.append(worker)
            self._ready.notify_all()

    def get(self, priority: int = 0) -> ParseWorker:
        with self._ready:
            mine = (priority, next(self._tickets))
            heapq.heappush(self._waiting, mine)
            while not self._workers or self._waiting[0] != mine:
                self._ready.wait()
            heapq.heappop(self._waiting)
            worker = self._workers.pop()
            if self._workers and self._waiting:
                self._ready.notify_all()  # the next waiter may take the next idle worker
            return worker


class ParserPool:
    """Parser processes shared by every thread that loads files: each file goes to the next
    idle worker in service, lower priorities (earlier batches) first.

    The first worker serves from the start (its process starts on first use, or by `start`).
    The others join once their process has started, one after the other in the background,
    from the first load of several files on: at a run's start the first worker, the model and
    Prefect's server already share the cores, and one more parser starting then delayed the
    first forward pass by seconds (benchmarks/RESULTS.md, "Scale")."""

    def __init__(self, size: int | None = None, model_busy_cores: bool = True) -> None:
        """`size` workers, else as many as `default_parse_workers` gives beside a model that
        keeps the cores busy or not (`ModelInfo.busy_cores`); made on first use."""
        self._size = size
        self._model_busy_cores = model_busy_cores
        self._lock = threading.Lock()
        self._workers: list[ParseWorker] = []
        self._idle = IdleWorkers()
        self._serving = 0  # workers put in service so far
        self._joining = False  # the others are being started

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
        self,
        sources: Sequence[SourceFile],
        options: ReadOptions,
        timeout: float,
        priority: int = 0,
    ) -> list[Document]:
        """The files' documents in order, parsed by as many workers at once as serve. Each
        takes RUN_FILES files at a time from the batch (AHEAD of them in flight), then goes
        back to the pool, so that batches loaded at the same time share the workers; a worker
        goes to the waiting load of the lowest `priority` first (the batch's number)."""
        if len(sources) > 1:
            self.workers()
            self._join_the_others()
        pending = iter(enumerate(sources))
        taking = threading.Lock()
        taken_all = threading.Event()
        loaded: dict[int, Document] = {}

        def take() -> tuple[int, SourceFile]:
            with taking:
                try:
                    return next(pending)
                except StopIteration:
                    taken_all.set()
                    raise

        def drain() -> None:
            while not taken_all.is_set():
                worker = self._idle.get(priority)
                try:
                    loaded.update(worker.load_run(take, options, timeout, RUN_FILES))
                finally:
                    self._idle.put(worker)

        parallel = min(self.serving(), len(sources))
        if parallel < 2:
            drain()
        else:
            with ThreadPoolExecutor(parallel) as threads:
                for done in [threads.submit(drain) for _ in range(parallel)]:
                    done.result()
        return [loaded[number] for number in range(len(sources))]


def _serve() -> None:
    """Worker loop: read a SourceFile and ReadOptions, write back its Document; EOF ends the
    loop."""
    os.nice(NICENESS)
    results = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints must not corrupt results
    warm_up()
    _reply(results, _READY)
    requests = sys.stdin.buffer
    while True:
        try:
            source, options = pickle.load(requests)
        except EOFError:
            return
        _reply(results, load_document(source, options))


if __name__ == "__main__":
    _serve()
