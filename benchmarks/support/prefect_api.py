"""A Prefect API for a benchmark's runs."""

from __future__ import annotations

import os
from pathlib import Path

from flows import temporary_server


def prefect_api_in(work: Path) -> None:
    """Make sure this process and its children reach a Prefect API: the one PREFECT_API_URL
    names, else a temporary server of this process's own in a new home under `work` (ready
    when this returns; it stops when the process exits)."""
    if "PREFECT_API_URL" in os.environ:
        return
    os.environ["PREFECT_HOME"] = str(work / "prefect-home")
    server = temporary_server.start()
    if server is not None:
        server.wait_until_ready()
