"""What every command line shares: dataset and reranker errors become one line on stderr and
exit status 1."""

from __future__ import annotations

import sys
from collections.abc import Callable

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
