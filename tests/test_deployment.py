"""The served `ingest` deployment against a real local Prefect server.

Starts `prefect server start` and `python -m deployments.serve` as subprocesses (own
PREFECT_HOME, 127.0.0.1, a free port), triggers runs through the CLI and the REST API, and
checks the LanceDB index they leave behind, and that two runs of the deployment never overlap.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import lancedb
import pytest

from tasks.schema import CHUNKS_TABLE, DOCUMENTS_TABLE

from .conftest import ROOT, SAMPLE

pytestmark = pytest.mark.integration

FILES = ("ch07-01-packages-and-crates.md", "ch15-00-smart-pointers.md", "ch16-00-concurrency.md")
EDITED, DELETED, UNTOUCHED = FILES
MARKER = "Quillwort marmalade sentinel: this sentence was added by the deployment test."
DEPLOYMENT = "test-reindex"
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}
RUN_ID = re.compile(r"UUID: ([0-9a-f-]{36})")  # in `prefect deployment run` output

SERVER_START_S = 120  # skip when the server is not healthy by then
REGISTER_S = 120  # serve process up and deployment registered
RUN_S = 300  # one flow run from trigger to a terminal state


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


@pytest.fixture
def stack(tmp_path) -> Iterator[dict]:
    """A Prefect server and the served deployment; both are stopped whatever happens."""
    source, index = tmp_path / "source", tmp_path / "index"
    source.mkdir()
    for name in FILES:
        shutil.copyfile(SAMPLE / "rust-book" / name, source / name)
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")},
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_UI_ENABLED": "false",
        # A run that finds the slot taken is retried after 2 s instead of 30 s.
        "PREFECT_SERVER_DEPLOYMENTS_CONCURRENCY_SLOT_WAIT_SECONDS": "2",
    }
    client_env = {**env, "PREFECT_API_URL": api, "PREFECT_RUNNER_POLL_FREQUENCY": "2"}
    logs = {"server": tmp_path / "server.log", "serve": tmp_path / "serve.log"}
    procs: list[subprocess.Popen] = []
    http = httpx.Client(base_url=api, timeout=30, trust_env=False)  # no proxy for 127.0.0.1
    try:
        server = start(
            [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1"]
            + ["--port", str(port)],
            env,
            logs["server"],
        )
        procs.append(server)

        def healthy() -> bool:
            if server.poll() is not None:
                pytest.skip(f"prefect server exited ({server.returncode}):\n{tail(logs['server'])}")
            try:
                return http.get("/health").status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(
            healthy,
            SERVER_START_S,
            "the Prefect server's /api/health",
            on_timeout=lambda msg: pytest.skip(f"{msg}:\n{tail(logs['server'])}"),
        )

        # Yearly cron: no scheduled run comes due while the test runs.
        serve = start(
            [sys.executable, "-m", "deployments.serve", "--source", str(source)]
            + ["--index", str(index), "--cron", "0 0 1 1 *", "--name", DEPLOYMENT],
            client_env,
            logs["serve"],
        )
        procs.append(serve)

        def registered() -> dict | None:
            assert serve.poll() is None, f"serve exited:\n{tail(logs['serve'])}"
            response = http.get(f"/deployments/name/ingest/{DEPLOYMENT}")
            return response.json() if response.status_code == 200 else None

        deployment = wait_for(registered, REGISTER_S, "the deployment to be registered")
        yield {
            "http": http,
            "env": client_env,
            "deployment": deployment,
            "source": source,
            "index": str(index.resolve()),
            "logs": logs,
        }
    finally:
        for proc in reversed(procs):  # serve first: it pauses its schedule via the server
            stop(proc)
        http.close()


def wait_terminal(stack: dict, run_id: str) -> dict:
    def finished() -> dict | None:
        run = stack["http"].get(f"/flow_runs/{run_id}").json()
        return run if run["state"]["type"] in TERMINAL else None

    run = wait_for(finished, RUN_S, f"flow run {run_id} to finish", interval=2)
    assert run["state"]["type"] == "COMPLETED", f"{run['state']}\n{tail(stack['logs']['serve'])}"
    return run


def at(run: dict, which: str) -> datetime:
    return datetime.fromisoformat(run[f"{which}_time"])


def state_names(stack: dict, run_id: str) -> list[str]:
    states = stack["http"].get("/flow_run_states/", params={"flow_run_id": run_id}).json()
    return [state["name"] for state in states]


def rows(uri: str, table: str) -> list[dict]:
    return lancedb.connect(uri).open_table(table).to_arrow().to_pylist()


def chunks_by_doc(uri: str) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for row in rows(uri, CHUNKS_TABLE):
        found.setdefault(row["doc_id"], []).append(row)
    return found


def test_served_deployment_reindexes_changes_one_run_at_a_time(stack):
    deployment, http, index = stack["deployment"], stack["http"], stack["index"]
    assert deployment["parameters"] == {
        "source_dir": str(stack["source"].resolve()),
        "index_uri": str(Path(index).resolve()),
    }
    assert deployment["global_concurrency_limit"]["limit"] == 1
    assert deployment["concurrency_options"]["collision_strategy"] == "ENQUEUE"
    assert [s["schedule"]["cron"] for s in deployment["schedules"]] == ["0 0 1 1 *"]

    # First run, triggered the way the README says.
    cli = subprocess.run(
        [sys.executable, "-m", "prefect", "deployment", "run", f"ingest/{DEPLOYMENT}"],
        cwd=ROOT,
        env=stack["env"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr
    match = RUN_ID.search(cli.stdout)
    assert match, cli.stdout
    wait_terminal(stack, match.group(1))
    before = chunks_by_doc(index)
    assert sorted(before) == sorted(FILES)
    ledger = {row["doc_id"]: row["status"] for row in rows(index, DOCUMENTS_TABLE)}
    assert ledger == dict.fromkeys(FILES, "indexed")

    # Edit one file, delete another, then trigger two runs at once: the deployment's
    # concurrency limit must hold one back (AwaitingConcurrencySlot) until the other is done.
    edited = stack["source"] / EDITED
    edited.write_text(edited.read_text(encoding="utf-8") + f"\n\n{MARKER}\n", encoding="utf-8")
    (stack["source"] / DELETED).unlink()
    run_ids = [
        http.post(f"/deployments/{deployment['id']}/create_flow_run", json={}).json()["id"]
        for _ in range(2)
    ]
    runs = sorted(
        (wait_terminal(stack, run_id) for run_id in run_ids), key=lambda r: at(r, "start")
    )
    assert at(runs[0], "end") <= at(runs[1], "start"), "two runs of the deployment overlapped"
    assert "AwaitingConcurrencySlot" in state_names(stack, runs[1]["id"])

    after = chunks_by_doc(index)
    assert sorted(after) == sorted([EDITED, UNTOUCHED])
    assert any(MARKER in row["text"] for row in after[EDITED])
    assert not any(MARKER in row["text"] for row in before[EDITED])
    untouched = [sorted(row["chunk_id"] for row in found[UNTOUCHED]) for found in (before, after)]
    assert untouched[0] == untouched[1], "an unchanged document was re-written"
    ledger = {row["doc_id"]: row["status"] for row in rows(index, DOCUMENTS_TABLE)}
    assert ledger == {EDITED: "indexed", UNTOUCHED: "indexed"}
