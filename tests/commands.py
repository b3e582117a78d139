"""Running a project command (`python -m MODULE ...`) in a fresh interpreter, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from .conftest import ROOT


def run_module(
    module: str,
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: Path = ROOT,
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    """`python -m MODULE ARGS` in `cwd` with `env` (None: this process's), output captured as text.

    The exit status is returned, not checked: each test asserts on it with the output it needs.
    """
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def own_prefect_home(home: Path) -> dict[str, str]:
    """This process's environment with its own Prefect home, so a command starts its own server."""
    return {**os.environ, "PREFECT_HOME": str(home)}


def with_import_times(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with Python's import profiler on (`-X importtime`): the command's stderr then
    names every module it imported (read them with `imported_modules`)."""
    return {**env, "PYTHONPROFILEIMPORTTIME": "1"}


def imported_modules(stderr: str) -> set[str]:
    """The modules a command run `with_import_times` imported, and their top-level packages."""
    names = {
        line.rpartition("|")[2].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    names.discard("imported package")  # the profiler's header line
    return names | {name.partition(".")[0] for name in names}
