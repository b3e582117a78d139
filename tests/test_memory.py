"""The writer's memory bounds (tasks/core/memory.py): set once, in the processes that write."""

from __future__ import annotations

import os
import subprocess
import sys

from .conftest import ROOT

PROBE = """
import os, sys, tempfile
from tasks.core.memory import WRITER_CACHE_BYTES, bound_native_memory, lance_cache_bytes
from tasks.dataset.location import connect

assert lance_cache_bytes() is None, "a process that searches keeps Lance's caches"
assert "LANCE_DEFAULT_FRAGMENT_READAHEAD" not in os.environ
bound_native_memory()
assert lance_cache_bytes() == WRITER_CACHE_BYTES
assert os.environ["LANCE_DEFAULT_FRAGMENT_READAHEAD"] == "1"
db = connect(tempfile.mkdtemp())  # a connection with the bounded caches still writes and reads
table = db.create_table("t", [{"x": 1}, {"x": 2}])
assert table.count_rows() == 2 and table.search().where("x = 2").to_list()[0]["x"] == 2
print("ok")
"""


def test_a_writer_bounds_lances_caches_and_read_ahead_a_searcher_does_not(tmp_path):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]
