"""Parse files in a separate process, so that one pathological file cannot stall a run.

A single long-lived worker process (`python -m tasks.parse_worker`, sharing no threads or model
state with the caller) loads one document at a time; requests and results travel as pickles
over its stdin and a private copy of its stdout (whatever the parsers print goes to stderr).
If a file takes longer than the timeout, the worker is killed, the file is recorded as failed
(`parse_timeout`), and a fresh worker starts with the next file. A worker that dies (a crash
in a native parser) costs only the file it was on.
"""

from __future__ import annotations

import os
import pickle
import select
import subprocess
import sys
import threading
from pathlib import Path

from tasks.records import Document, SourceFile

STARTUP_TIMEOUT = 300  # seconds for a fresh worker to import the parsers and load spaCy
# Parsing runs ahead of embedding; at a lower CPU priority it fills the cycles the model leaves
# idle instead of stalling the model's threads, which wait for each other (measured on 150
# generated Markdown files: ingest/raw-encode ratio 0.871 at the same priority, 0.889 at 10).
NICENESS = 10
_READY = "ready"


class ParseWorker:
    """The worker process and the pipes to it; safe to share between threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        process = subprocess.Popen(
            [sys.executable, "-m", "tasks.parse_worker"],
            cwd=Path(__file__).resolve().parents[1],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._process = process
        if self._receive(STARTUP_TIMEOUT) != _READY:
            self._stop()
            raise RuntimeError(f"the parser process did not start within {STARTUP_TIMEOUT} s")
        return process

    def _stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            for pipe in (self._process.stdin, self._process.stdout):
                pipe.close()
        self._process = None

    def _receive(self, timeout: float):
        """The next pickle from the worker; TimeoutError if none arrives in time."""
        readable, _, _ = select.select([self._process.stdout], [], [], timeout)
        if not readable:
            raise TimeoutError
        return pickle.load(self._process.stdout)

    def load(self, source: SourceFile, timeout: float) -> Document:
        """The loaded document, or a failed one if the worker overran `timeout` or died."""
        with self._lock:
            process = self._process or self._start()
            try:
                pickle.dump(source, process.stdin)
                process.stdin.flush()
                return self._receive(timeout)
            except TimeoutError:
                error = f"parse_timeout: parsing took longer than {timeout:g} s"
            except (EOFError, OSError, pickle.UnpicklingError) as exc:
                error = f"parse_crash: the parser process died ({type(exc).__name__})"
            self._stop()
            return Document.failed(source, error)


WORKER = ParseWorker()


def _serve() -> None:
    """Worker loop: read a SourceFile, write back its Document; EOF ends the loop."""
    os.nice(NICENESS)
    results = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints must not corrupt results
    from tasks.load import load_document, warm_up

    warm_up()
    pickle.dump(_READY, results)
    results.flush()
    requests = sys.stdin.buffer
    while True:
        try:
            source = pickle.load(requests)
        except EOFError:
            return
        pickle.dump(load_document(source), results)
        results.flush()


if __name__ == "__main__":
    _serve()
