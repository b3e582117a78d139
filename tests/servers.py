"""Real local servers for tests: `prefect server start` and the child processes that use it.

Each server gets its own PREFECT_HOME, binds 127.0.0.1 on a free port and is stopped with its
whole process group, whatever the test does. Its database starts from the migrated, empty seed
the commands' temporary servers keep (flows/temporary_server.py), when there is one.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from flows.temporary_server import seed_database

from .conftest import ROOT

SERVER_START_S = 120  # skip when the server is not healthy by then


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tail(path: Path, chars: int = 4000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """A subprocess in its own process group (the runner spawns children), logging to `log`."""
    with open(log, "wb") as handle:
        return subprocess.Popen(
            args,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop(proc: subprocess.Popen, timeout: float = 30) -> None:
    """SIGTERM the process group, SIGKILL it if it has not exited after `timeout` seconds."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        except ProcessLookupError:
            return
    try:  # also reaps children left behind in the group
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=timeout)


def wait_for(predicate, seconds: float, what: str, on_timeout=pytest.fail, interval: float = 1):
    """Poll `predicate` until it returns something truthy; bounded by `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(interval)
    on_timeout(f"timed out after {seconds:.0f} s waiting for {what}")


@dataclass
class PrefectServer:
    url: str  # the UI, when it is enabled
    env: dict[str, str]  # for client processes: PREFECT_API_URL points at this server
    http: httpx.Client  # the REST API, base URL .../api
    log: Path


@contextmanager
def prefect_server(tmp_path: Path, ui: bool = False, **settings: str) -> Iterator[PrefectServer]:
    """A healthy `prefect server start` with its home under `tmp_path`; stopped on exit.

    `settings` are extra PREFECT_* variables for the server and its clients. Skips the test
    when the server exits or is not healthy within SERVER_START_S.
    """
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    home = tmp_path / "prefect-home"
    if seed_database().is_file():  # no ~200 migrations at start
        home.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(seed_database(), home / "prefect.db")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")},
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_UI_ENABLED": str(ui).lower(),
        "PREFECT_SERVER_UI_API_URL": f"{url}/api",  # the UI would call port 4200 otherwise
        **settings,
    }
    log = tmp_path / "server.log"
    http = httpx.Client(base_url=f"{url}/api", timeout=30, trust_env=False)  # no proxy here
    server = start(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1"]
        + ["--port", str(port)],
        env,
        log,
    )
    try:

        def healthy() -> bool:
            if server.poll() is not None:
                pytest.skip(f"prefect server exited ({server.returncode}):\n{tail(log)}")
            try:
                return http.get("/health").status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(
            healthy,
            SERVER_START_S,
            "the Prefect server's /api/health",
            on_timeout=lambda msg: pytest.skip(f"{msg}:\n{tail(log)}"),
        )
        yield PrefectServer(url, {**env, "PREFECT_API_URL": f"{url}/api"}, http, log)
    finally:
        stop(server)
        http.close()
