"""A temporary Prefect API server, started as a command's first act so it starts meanwhile.

Without an API server configured, Prefect starts a temporary one when a flow first runs:
it imports the server's modules into the command's process and then waits for the server
process to answer, all before the flow's first line (together most of a no-change ingest
run's wall time, see README "Everyday paths"). `python -m flows.ingest` instead starts the
same server process (Prefect's own uvicorn command and settings, no UI) before it imports
anything heavy, and points Prefect at it with PREFECT_API_URL; the server starts while the
command imports Prefect, LanceDB and the model, and `wait_until_ready` is only a check by
the time the flow is called. The server stops when the command exits, as Prefect's does.

Nothing changes where the user has an API server configured (flows/prefect_settings.py).
This module imports no Prefect: it must be cheap to import first.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import random
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from flows.prefect_settings import configured_api_url

PORTS = range(8000, 9000)  # where Prefect's own temporary servers go
DEFAULT_STARTUP_TIMEOUT = 120.0  # seconds; PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS wins


@dataclass
class TemporaryServer:
    process: subprocess.Popen[bytes]
    url: str  # the API URL, ".../api"

    def wait_until_ready(self) -> None:
        """Return once the server answers its health check; RuntimeError if it cannot start."""
        timeout = float(
            os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS")
            or DEFAULT_STARTUP_TIMEOUT
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the temporary Prefect server exited with status {self.process.returncode}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"the temporary Prefect server did not start within {timeout:g} s")

    def stop(self) -> None:
        if self.process.poll() is None:
            print(
                f"Stopping temporary Prefect server on {self.url.removesuffix('/api')}",
                file=sys.stderr,
            )
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _free_port() -> int:
    for port in random.sample(PORTS, 20):
        with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port for a temporary Prefect server")


def start() -> TemporaryServer | None:
    """Start Prefect's temporary API server now, unless an API server is configured."""
    if configured_api_url() is not None:
        return None
    spec = importlib.util.find_spec("prefect")  # where it is installed, without importing it
    assert spec is not None and spec.submodule_search_locations
    app_dir = Path(next(iter(spec.submodule_search_locations))).parent
    port = _free_port()
    address = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "uvicorn", "--app-dir", str(app_dir), "--factory"]
    command += ["prefect.server.api.server:create_app", "--host", "127.0.0.1"]
    command += ["--port", str(port), "--log-level", "error", "--lifespan", "on"]
    # The settings Prefect gives its own temporary server: no UI, an ephemeral server.
    server_env = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1"}
    server_env["PREFECT__SERVER_FINAL"] = "1"
    print(f"Starting temporary Prefect server on {address}", file=sys.stderr)
    process = subprocess.Popen(command, env={**os.environ, **server_env})
    server = TemporaryServer(process, f"{address}/api")
    os.environ["PREFECT_API_URL"] = server.url  # before Prefect is imported
    atexit.register(server.stop)
    return server
