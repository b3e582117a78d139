"""Prefect's temporary API server, started by a command's main() before it imports Prefect.

Prefect's own (`SubprocessASGIServer`, prefect.server.api.server) starts when a flow first
runs: it imports the server's modules into the command (seconds), then waits for the server.
Started here first, the same server process starts while the command imports Prefect,
LanceDB and the model, and `wait_until_ready` is only a check by the time the flow is called.
Prefect's class cannot do that (importing it is the slow part; its start() blocks), so this
runs its command (`uvicorn_command`, compared with Prefect's by tests/test_temporary_server.py)
and, like it, moves to another port when uvicorn cannot start. Nothing starts where an API
server is configured (flows/prefect_settings.py) or Prefect is already imported.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

from flows.prefect_settings import configured_api_url

PORTS = range(8000, 9000)  # where Prefect's own temporary servers go
SERVER_ENV = {  # what Prefect sets for its temporary server: no UI, an ephemeral server
    "PREFECT_UI_ENABLED": "0",
    "PREFECT__SERVER_EPHEMERAL": "1",
    "PREFECT__SERVER_FINAL": "1",
}
STARTUP_FAILURE = 3  # uvicorn's exit status when it cannot start, e.g. the port is taken


def uvicorn_command(port: int) -> list[str]:
    """Prefect's command for its temporary server on `port`."""
    spec = importlib.util.find_spec("prefect")  # where it is installed, without importing it
    assert spec is not None and spec.origin is not None
    app_dir = str(Path(spec.origin).parents[1])
    command = [sys.executable, "-m", "uvicorn", "--app-dir", app_dir, "--factory"]
    command += ["prefect.server.api.server:create_app", "--host", "127.0.0.1"]
    return command + ["--port", str(port), "--log-level", "error", "--lifespan", "on"]


def _free_port() -> int:
    for port in random.sample(PORTS, 20):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port for a temporary Prefect server")


class TemporaryServer:
    """The server process, which PREFECT_API_URL points at."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.process = self._launch()

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _launch(self) -> subprocess.Popen[bytes]:
        print(f"Starting temporary Prefect server on {self.address}", file=sys.stderr)
        process = subprocess.Popen(uvicorn_command(self.port), env={**os.environ, **SERVER_ENV})
        os.environ["PREFECT_API_URL"] = f"{self.address}/api"
        return process

    def wait_until_ready(self) -> None:
        """Return once the server answers its health check; RuntimeError if it cannot start
        within Prefect's server.ephemeral.startup_timeout_seconds."""
        import httpx  # with Prefect, imported by now: the flow is next
        from prefect.context import refresh_global_settings_context
        from prefect.settings import get_current_settings

        timeout = get_current_settings().server.ephemeral.startup_timeout_seconds
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2) as client:
            while time.monotonic() < deadline:
                status = self.process.poll()
                if status == STARTUP_FAILURE:  # as Prefect does, try another port
                    self.port = _free_port()
                    self.process = self._launch()
                    refresh_global_settings_context()  # Prefect reads the new PREFECT_API_URL
                    continue
                if status is not None:
                    raise RuntimeError(f"the temporary Prefect server exited with status {status}")
                try:
                    if client.get(f"{self.address}/api/health").status_code == 200:
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


def start() -> TemporaryServer | None:
    """Start Prefect's temporary API server now, unless an API server is configured or
    Prefect is already imported. It stops when the process exits, after Prefect has sent
    its last logs and events (those are sent before `atexit` functions run), as Prefect's
    own does."""
    if configured_api_url() is not None or "prefect" in sys.modules:
        return None
    server = TemporaryServer()
    atexit.register(server.stop)
    return server
