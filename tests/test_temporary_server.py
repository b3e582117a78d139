"""The command's temporary Prefect server is Prefect's own: the same command and settings, and
the same move to another port when uvicorn cannot start on the one drawn."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from flows import temporary_server

from .conftest import ROOT


def test_the_command_and_its_settings_are_prefects_own(monkeypatch):
    """Fails when Prefect changes how it starts its temporary server: flows/temporary_server.py
    then needs the same change."""
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import get_current_settings

    launched: dict[str, object] = {}
    monkeypatch.setattr(subprocess, "Popen", lambda **kwargs: launched.update(kwargs))
    server = SubprocessASGIServer(port=7999)
    try:
        server._run_uvicorn_command()  # what SubprocessASGIServer.start() runs
    finally:
        server.stop()
    assert launched["args"] == temporary_server.uvicorn_command(7999)
    env = launched["env"]
    assert isinstance(env, dict)
    settings = get_current_settings().to_environment_variables(exclude_unset=True)
    added = {k: v for k, v in env.items() if k not in os.environ and k not in settings}
    assert added == temporary_server.SERVER_ENV


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
