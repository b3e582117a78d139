"""The command's temporary Prefect server is Prefect's own: the same move to another port when
uvicorn cannot start on the one drawn (its command and settings are Prefect's, checked by
tests/test_prefect_compat.py), a seeded database, and it stops with the command."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from flows import temporary_server

from .conftest import ROOT

PORT_TAKEN_PROBE = """
import socket
from flows import temporary_server

taken = socket.socket()
taken.bind(("127.0.0.1", 0))
taken.listen()
drawn = iter([taken.getsockname()[1]])
free_port = temporary_server._free_port
temporary_server._free_port = lambda: next(drawn, None) or free_port()
server = temporary_server.start()
first = server.port
server.wait_until_ready()
from prefect.settings import get_current_settings

print(first == taken.getsockname()[1], server.port != first)
print(get_current_settings().api.url == f"{server.address}/api")
"""


KILLED_PROBE = """
import time
from flows import temporary_server

server = temporary_server.start()
server.wait_until_ready()
print(server.process.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.integration
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_command_killed_by_sigkill_takes_its_server_with_it(tmp_path):
    """`atexit` never runs in a command killed by SIGKILL (a watcher stopped by kill -9, the
    OOM killer): the server still stops, on the signal Linux sends when its parent dies."""
    import psutil

    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    command = subprocess.Popen(
        [sys.executable, "-c", KILLED_PROBE],
        cwd=ROOT,
        env={**env, "PREFECT_HOME": str(tmp_path / "prefect")},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert command.stdout is not None
        server = psutil.Process(int(command.stdout.readline()))
        assert server.status() != psutil.STATUS_ZOMBIE
    finally:
        command.kill()
        command.wait()

    def running() -> bool:
        try:
            return server.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + 30
    while running() and time.monotonic() < deadline:
        time.sleep(0.2)
    if running():
        server.kill()
        pytest.fail("the server outlived the command that started it")


@pytest.mark.integration
def test_a_server_that_cannot_take_its_port_moves_to_another(tmp_path):
    """As Prefect does: uvicorn exits with status 3 on a taken port, the server starts on
    another, and Prefect (already imported by then) is pointed at the new one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    result = subprocess.run(
        [sys.executable, "-c", PORT_TAKEN_PROBE],
        cwd=ROOT,
        env={**env, "PREFECT_HOME": str(tmp_path / "prefect")},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["True", "True", "True"], result.stderr[-3000:]
    assert result.stderr.count("Starting temporary Prefect server") == 2, result.stderr[-3000:]


SEED_PROBE = """
import sys
from pathlib import Path
from flows import temporary_server

temporary_server.SEEDS = Path(sys.argv[1])
server = temporary_server.start()
server.wait_until_ready()
from prefect import flow

@flow
def answer() -> int:
    return 42

print(answer())
"""


def run_seed_probe(seeds, home):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    return subprocess.run(
        [sys.executable, "-c", SEED_PROBE, str(seeds)],
        cwd=ROOT,
        env={**env, "PREFECT_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.integration
def test_a_new_home_starts_from_the_seed_the_first_one_kept(tmp_path):
    """The first server on a new home keeps its migrated, empty database as the seed; the next
    new home starts from that copy (a marker put in the seed shows it) and records runs."""
    import sqlite3

    seeds = tmp_path / "seeds"
    first = run_seed_probe(seeds, tmp_path / "home1")
    assert first.returncode == 0 and first.stdout.split() == ["42"], first.stderr[-3000:]
    (seed,) = seeds.iterdir()
    with sqlite3.connect(seed) as db:
        assert db.execute("SELECT count(*) FROM flow_run").fetchone() == (0,), "seed not empty"
        db.execute("CREATE TABLE seed_marker (x)")

    second = run_seed_probe(seeds, tmp_path / "home2")
    assert second.returncode == 0 and second.stdout.split() == ["42"], second.stderr[-3000:]
    with sqlite3.connect(tmp_path / "home2" / "prefect.db") as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        assert "seed_marker" in tables, "the second home was migrated, not seeded"


def test_no_seed_where_the_user_configured_a_database(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "home"))
    assert temporary_server.default_database() == tmp_path / "home" / "prefect.db"
    monkeypatch.setenv("PREFECT_API_DATABASE_CONNECTION_URL", "postgresql+asyncpg://db/prefect")
    assert temporary_server.default_database() is None


def test_block_types_are_left_unregistered_unless_the_user_says_otherwise(monkeypatch, tmp_path):
    """Registration is off on the server, except where the user's own settings name it (here
    a prefect.toml of the working directory)."""
    launched: list[dict[str, str]] = []
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(subprocess, "Popen", lambda command, env, **_: launched.append(env))
    monkeypatch.setenv("PREFECT_API_URL", "http://unused/api")  # _launch points it at the server
    for name in temporary_server.REGISTER_BLOCKS:
        monkeypatch.delenv(name, raising=False)
    server = temporary_server.TemporaryServer.__new__(temporary_server.TemporaryServer)
    server.port = 1
    server._launch()
    (tmp_path / "prefect.toml").write_text("[server]\nregister_blocks_on_start = true\n")
    server._launch()
    assert launched[0]["PREFECT_SERVER_REGISTER_BLOCKS_ON_START"] == "false"
    assert "PREFECT_SERVER_REGISTER_BLOCKS_ON_START" not in launched[1]
