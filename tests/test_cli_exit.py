"""A command's process ends with its status after every atexit handler ran and its output was
flushed, though the collector's last passes are skipped (flows/cli.py, exit_process)."""

from __future__ import annotations

import subprocess
import sys

from .conftest import ROOT

SCRIPT = """
import atexit, gc, sys
from flows.cli import exit_process

atexit.register(lambda: print("atexit ran, collector on:", gc.isenabled()))
print("buffered", end="")
sys.stderr.write("to stderr")
exit_process(3)
"""


def test_the_status_atexit_handlers_and_buffered_output_survive_the_fast_exit():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout == "bufferedatexit ran, collector on: False\n"
    assert done.stderr == "to stderr"


def test_main_returns_its_status_and_leaves_the_callers_collector_alone(tmp_path, capsys):
    import gc

    from flows.query import main

    frozen = gc.get_freeze_count()
    assert main(["--stats", "--index", str(tmp_path / "no-such-index")]) == 1
    assert "error:" in capsys.readouterr().err
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen
