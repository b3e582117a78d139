"""What every command line shares: dataset and reranker errors become one line on stderr and
exit status 1, and a process that ends without the interpreter's last garbage collection."""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from typing import NoReturn

from tasks.dataset.location import DatasetError
from tasks.search.rerank import RerankerError


def exit_status(command: Callable[[], int]) -> int:
    """Run a command; a DatasetError (missing, foreign or unreachable dataset) or a
    RerankerError (no usable cross-encoder at --rerank) is reported as `error: …` on stderr
    with exit status 1, the same for every command."""
    try:
        return command()
    except (DatasetError, RerankerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def exit_process(status: int) -> NoReturn:
    """End a command's process with `status`, skipping the garbage collector's passes over the
    objects still alive (Prefect's, pydantic's and LanceDB's modules: 0.5-0.6 s of a no-change
    ingest's exit, benchmarks/RESULTS.md). They are frozen and left to the operating system,
    as at any process exit; threads are joined, atexit handlers (Prefect's event and log
    drains, logging's flush) run and streams are flushed as usual. For `__main__` only: a test
    calling `main()` keeps its collector."""
    gc.disable()
    gc.freeze()
    sys.exit(status)
