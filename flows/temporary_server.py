"""Prefect's temporary API server, started by a command's main() before it imports Prefect.

Prefect's own (`SubprocessASGIServer`, prefect.server.api.server) starts when a flow first
runs: it imports the server's modules into the command (seconds), then waits for the server.
Started here first, the same server process starts while the command imports Prefect,
LanceDB and the model, and `wait_until_ready` is only a check by the time the flow is called.
Prefect's class cannot do that (importing it is the slow part; its start() blocks), so this
runs its command with its environment (`server_command` and `SERVER_ENV` of
tasks/core/prefect_compat.py, compared with Prefect's by tests/test_prefect_compat.py) and,
like it, moves to another port when uvicorn cannot start. Nothing starts where an API server
is configured (flows/prefect_settings.py) or Prefect is already imported.

Two things Prefect's server does at start are left out, as they made most of its start-up
(CPU seconds measured here, benchmarks/RESULTS.md "Start-up of the temporary server"):
- Registering Prefect's block types in its database (2.3 s on a new home): a temporary server
  has no UI and doc-indexer saves no blocks; a `prefect server start` on the same home
  registers them.
- Creating a new home's database through its ~200 migrations (5.7 s): the first temporary
  server of a Prefect version keeps a copy of its database, migrated and still empty, in
  `.cache/prefect/`; a later one on a new home starts from that copy.
"""

from __future__ import annotations

import atexit
import os
import random
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

from flows.prefect_settings import configured_api_url, user_settings
from tasks.core import prefect_compat
from tasks.core.prefect_api import TEMPORARY_API_ENV
from tasks.core.prefect_compat import DATABASE_FILE, REGISTER_BLOCKS, SERVER_ENV

PORTS = range(8000, 9000)  # where Prefect's own temporary servers go
# see the module doc; left out where the user set it under either of REGISTER_BLOCKS' names
OUR_SERVER_ENV = {"PREFECT_SERVER_REGISTER_BLOCKS_ON_START": "false"}
# The launcher of `_stopping_with_this_process`: prctl(PR_SET_PDEATHSIG = 1, SIGTERM), then
# exit if the parent (argv[1]) died before that, else exec the command (argv[2:]). A fresh
# process rather than subprocess's preexec_fn, which runs Python between fork and exec: that
# is unsafe beside threads and runs other libraries' fork handlers (LanceDB warns).
_LAUNCHER = (
    "import ctypes, os, signal, sys; "
    "ctypes.CDLL(None).prctl(1, signal.SIGTERM); "
    "os.getppid() == int(sys.argv[1]) or sys.exit(1); "
    "os.execv(sys.argv[2], sys.argv[2:])"
)
SEEDS = Path(__file__).resolve().parents[1] / ".cache" / "prefect"


def _free_port() -> int:
    for port in random.sample(PORTS, 20):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port for a temporary Prefect server")


def default_database() -> Path | None:
    """Prefect's SQLite database in its home, or None where the user configured another."""
    found = user_settings(Path.cwd())
    if prefect_compat.DATABASE_SETTINGS & found.keys():
        return None
    home = found.get("PREFECT_HOME") or os.environ.get("PREFECT_HOME") or "~/.prefect"
    return Path(str(home)).expanduser().resolve() / DATABASE_FILE


def seed_database() -> Path:
    """The empty, migrated database kept for this Prefect version."""
    return SEEDS / f"prefect-{version('prefect')}.db"


def _plant_seed(database: Path) -> bool:
    """Start a new home's database from the seed, if there is one; True when planted. The
    copy is linked into place, so two commands starting on the same new home cannot replace
    a database one of them already uses."""
    seed = seed_database()
    if not seed.is_file():
        return False
    database.parent.mkdir(parents=True, exist_ok=True)
    partial = database.with_name(f".{database.name}.{os.getpid()}")
    try:
        shutil.copyfile(seed, partial)
        os.link(partial, database)
    except OSError:  # planted by another command meanwhile, or not possible here
        return False
    finally:
        partial.unlink(missing_ok=True)
    return True


def _keep_seed(database: Path) -> None:
    """Copy a database the server has just migrated, before any run is recorded in it, as the
    seed of later new homes (SQLite's backup: consistent while the server holds it open)."""
    seed = seed_database()
    partial = seed.with_name(f".{seed.name}.{os.getpid()}")
    source = copy = None
    try:
        seed.parent.mkdir(parents=True, exist_ok=True)
        source, copy = sqlite3.connect(database), sqlite3.connect(partial)
        source.backup(copy)
        copy.execute("PRAGMA journal_mode = DELETE")  # one file, as the seed is copied
        runs = f"SELECT count(*) FROM {prefect_compat.FLOW_RUN_TABLE}"
        empty = copy.execute(runs).fetchone()[0] == 0
        copy.close()
        if empty:
            partial.replace(seed)
    except (OSError, sqlite3.Error):  # a seed is a saving, never a reason to fail
        pass
    finally:
        for connection in (source, copy):
            if connection is not None:
                connection.close()
        partial.unlink(missing_ok=True)


class TemporaryServer:
    """The server process, which PREFECT_API_URL points at."""

    def __init__(self) -> None:
        self.port = _free_port()
        database = default_database()
        # a new home whose database no seed could start: keep it as the seed once migrated
        self._new_database = database if database is not None and not database.exists() else None
        if self._new_database is not None and _plant_seed(self._new_database):
            self._new_database = None
        self.process = self._launch()

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _launch(self) -> subprocess.Popen[bytes]:
        print(f"Starting temporary Prefect server on {self.address}", file=sys.stderr)
        ours = {} if REGISTER_BLOCKS & user_settings(Path.cwd()).keys() else OUR_SERVER_ENV
        env = {**os.environ, **ours, **SERVER_ENV}
        command = prefect_compat.server_command(self.port)
        process = subprocess.Popen(_stopping_with_this_process(command), env=env)
        # named as this command's own too: not a shared API (tasks/core/prefect_api.py)
        os.environ["PREFECT_API_URL"] = os.environ[TEMPORARY_API_ENV] = f"{self.address}/api"
        return process

    def wait_until_ready(self) -> None:
        """Return once the server answers its health check; RuntimeError if it cannot start
        within Prefect's server.ephemeral.startup_timeout_seconds."""
        import httpx  # with Prefect, imported by now: the flow is next

        timeout = prefect_compat.startup_timeout()
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2) as client:
            while time.monotonic() < deadline:
                status = self.process.poll()
                if status == prefect_compat.PORT_TAKEN:  # as Prefect does, try another port
                    self.port = _free_port()
                    self.process = self._launch()
                    prefect_compat.reread_settings()  # Prefect reads the new PREFECT_API_URL
                    continue
                if status is not None:
                    raise RuntimeError(f"the temporary Prefect server exited with status {status}")
                try:
                    if client.get(f"{self.address}/api/health").status_code == 200:
                        if self._new_database is not None:
                            _keep_seed(self._new_database)
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
        raise RuntimeError(f"the temporary Prefect server did not start within {timeout:g} s")

    def stop(self) -> None:
        if self.process.poll() is None:
            print(f"Stopping temporary Prefect server on {self.address}", file=sys.stderr)
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _stopping_with_this_process(command: list[str]) -> list[str]:
    """`command`, started so that it gets SIGTERM when this process dies, even by SIGKILL
    (where `atexit` never runs): on Linux, a small launcher sets PR_SET_PDEATHSIG and execs
    the command (the setting survives the exec). Elsewhere `command` as it is (there a
    killed command leaves its server running). Popen must be called from the thread that
    outlives the server (the signal follows the thread that started it): the main one."""
    if not sys.platform.startswith("linux"):
        return command
    return [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(os.getpid()), *command]


def start() -> TemporaryServer | None:
    """Start Prefect's temporary API server now, unless an API server is configured or
    Prefect is already imported. It stops when the process exits, after Prefect has sent
    its last logs and events (those are sent before `atexit` functions run), as Prefect's
    own does; on Linux also when the process is killed (`_stopping_with_this_process`)."""
    if configured_api_url() is not None or "prefect" in sys.modules:
        return None
    server = TemporaryServer()
    atexit.register(server.stop)
    return server
