"""What every command line shares: dataset errors become one line on stderr and exit status 1."""

from __future__ import annotations

import sys
from collections.abc import Callable

from tasks.dataset.location import DatasetError


def exit_status(command: Callable[[], int]) -> int:
    """Run a command; a DatasetError (missing, foreign or unreachable dataset) is reported as
    `error: …` on stderr with exit status 1, the same for every command."""
    try:
        return command()
    except DatasetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
