"""The served `ingest` deployment against a real local Prefect server.

Starts `prefect server start` (tests/servers.py: own PREFECT_HOME, 127.0.0.1, a free port) once
for the module and, per test, `python -m deployments.serve` under a deployment name of its own as
subprocesses, triggers runs through the CLI and the REST API, and checks the LanceDB index they
leave behind, and that two runs of the deployment never overlap.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import lancedb
import pytest

from tasks.dataset.schema import CHUNKS_TABLE, DOCUMENTS_TABLE

from .commands import run_module
from .conftest import SAMPLE
from .servers import PrefectServer, prefect_server, start, stop, tail, wait_for

pytestmark = pytest.mark.integration

FILES = ("ch07-01-packages-and-crates.md", "ch15-00-smart-pointers.md", "ch16-00-concurrency.md")
EDITED, DELETED, UNTOUCHED = FILES
MARKER = "Quillwort marmalade sentinel: this sentence was added by the deployment test."
DEPLOYMENT = "test-reindex"
WATCHED_DEPLOYMENT = "test-watch"  # the --watch test's, on the same server
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}
RUN_ID = re.compile(r"UUID: ([0-9a-f-]{36})")  # in `prefect deployment run` output

REGISTER_S = 120  # serve process up and deployment registered
RUN_S = 300  # one flow run from trigger to a terminal state


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[PrefectServer]:
    """One Prefect server for the module's served deployments (each test its own name)."""
    # A run that finds the slot taken is retried after 1 s instead of 30 s.
    with prefect_server(
        tmp_path_factory.mktemp("server"),
        PREFECT_SERVER_DEPLOYMENTS_CONCURRENCY_SLOT_WAIT_SECONDS="1",
    ) as running:
        yield running


@contextmanager
def serving(server: PrefectServer, tmp_path: Path, name: str, *extra: str) -> Iterator[dict]:
    """The deployments served under `name` on `server` (`extra`: more serve arguments);
    stopped whatever happens."""
    source, index = tmp_path / "source", tmp_path / "index"
    source.mkdir()
    for file in FILES:
        shutil.copyfile(SAMPLE / "rust-book" / file, source / file)
    logs = {"serve": tmp_path / "serve.log"}
    client_env = {**server.env, "PREFECT_RUNNER_POLL_FREQUENCY": "1"}
    # Yearly cron: no scheduled run comes due while the test runs.
    serve = start(
        [sys.executable, "-m", "deployments.serve", "--source", str(source)]
        + ["--index", str(index), "--cron", "0 0 1 1 *", "--name", name, *extra],
        client_env,
        logs["serve"],
    )
    try:

        def registered() -> dict | None:
            assert serve.poll() is None, f"serve exited:\n{tail(logs['serve'])}"
            response = server.http.get(f"/deployments/name/ingest/{name}")
            return response.json() if response.status_code == 200 else None

        deployment = wait_for(
            registered, REGISTER_S, "the deployment to be registered", interval=0.5
        )
        yield {
            "http": server.http,
            "env": client_env,
            "deployment": deployment,
            "source": source,
            "index": str(index.resolve()),
            "logs": logs,
        }
    finally:
        stop(serve)  # before the server goes: serve pauses its schedule via the server


@pytest.fixture
def stack(server, tmp_path) -> Iterator[dict]:
    with serving(server, tmp_path, DEPLOYMENT) as served:
        yield served


@pytest.fixture
def watched_stack(server, tmp_path) -> Iterator[dict]:
    with serving(server, tmp_path, WATCHED_DEPLOYMENT, "--watch", "--debounce", "0.1") as served:
        yield served


def wait_terminal(stack: dict, run_id: str) -> dict:
    def finished() -> dict | None:
        run = stack["http"].get(f"/flow_runs/{run_id}").json()
        return run if run["state"]["type"] in TERMINAL else None

    run = wait_for(finished, RUN_S, f"flow run {run_id} to finish", interval=0.5)
    assert run["state"]["type"] == "COMPLETED", f"{run['state']}\n{tail(stack['logs']['serve'])}"
    return run


def create_run(http: Any, deployment_id: str, body: dict) -> dict:
    """A flow run of the deployment, created over the API. The test server's SQLite database
    can be busy for a moment while the served runs write (a 5xx answer): ask again."""
    for _ in range(5):
        answer = http.post(f"/deployments/{deployment_id}/create_flow_run", json=body)
        if answer.status_code < 500:
            break
        time.sleep(1)
    assert answer.status_code in (200, 201), answer.text
    return answer.json()


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
    cli = run_module(
        "prefect", "deployment", "run", f"ingest/{DEPLOYMENT}", env=stack["env"], timeout=120
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr
    match = RUN_ID.search(cli.stdout)
    assert match, cli.stdout
    wait_terminal(stack, match.group(1))
    before = chunks_by_doc(index)
    assert sorted(before) == sorted(FILES)
    ledger = {row["doc_id"]: row["status"] for row in rows(index, DOCUMENTS_TABLE)}
    assert ledger == dict.fromkeys(FILES, "indexed")

    # A search from the query deployment's form, read back as its query-hits artifact.
    search = http.get(f"/deployments/name/query/{DEPLOYMENT}").json()
    assert search["parameters"] == {"index_uri": str(Path(index).resolve())}
    assert "text" in search["parameter_openapi_schema"]["required"]
    question = {"text": "What is a crate and what is a package?", "k": 3}
    run = create_run(http, search["id"], {"parameters": question})
    wait_terminal(stack, run["id"])
    only_run = {"artifacts": {"flow_run_id": {"any_": [run["id"]]}}}
    artifacts = http.post("/artifacts/filter", json=only_run).json()
    (hits,) = [a for a in artifacts if a["key"] == "query-hits"]
    table = json.loads(hits["data"])
    assert len(table) == 3 and table[0]["source"] == EDITED
    assert question["text"] in hits["description"]

    # The audit deployment: the dataset the first run made matches its folder.
    check = http.get(f"/deployments/name/audit/{DEPLOYMENT}").json()
    assert check["parameters"] == search["parameters"] | {
        "source_dir": str(stack["source"].resolve())
    }
    run = create_run(http, check["id"], {})
    wait_terminal(stack, run["id"])  # Completed: the index is clean
    only_run = {"artifacts": {"flow_run_id": {"any_": [run["id"]]}}}
    (report,) = [
        a
        for a in http.post("/artifacts/filter", json=only_run).json()
        if a["key"] == "audit-report"
    ]
    assert [row["problems"] for row in json.loads(report["data"])] == [0]

    # Edit one file, delete another, then trigger two runs at once: the deployment's
    # concurrency limit must hold one back (AwaitingConcurrencySlot) until the other is done.
    edited = stack["source"] / EDITED
    edited.write_text(edited.read_text(encoding="utf-8") + f"\n\n{MARKER}\n", encoding="utf-8")
    (stack["source"] / DELETED).unlink()
    run_ids = [create_run(http, deployment["id"], {})["id"] for _ in range(2)]
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


def ledger_or_none(uri: str) -> dict[str, str] | None:
    """doc_id → status, or None while the dataset is not there yet."""
    try:
        return {row["doc_id"]: row["status"] for row in rows(uri, DOCUMENTS_TABLE)}
    except (FileNotFoundError, ValueError):
        return None


def test_served_with_watch_indexes_each_change_of_the_folder(watched_stack):
    http, index, source = watched_stack["http"], watched_stack["index"], watched_stack["source"]
    reconciled = dict.fromkeys(FILES, "indexed")
    wait_for(lambda: ledger_or_none(index) == reconciled, RUN_S, "the reconcile run")
    before = chunks_by_doc(index)

    edited = source / EDITED
    edited.write_text(edited.read_text(encoding="utf-8") + f"\n\n{MARKER}\n", encoding="utf-8")
    (source / DELETED).unlink()

    def reflected() -> dict | None:
        after = chunks_by_doc(index)
        return after if any(MARKER in row["text"] for row in after.get(EDITED, ())) else None

    after = wait_for(reflected, RUN_S, "the edit to be indexed", interval=0.5)
    wait_for(lambda: DELETED not in chunks_by_doc(index), RUN_S, "the delete", interval=0.5)
    assert ledger_or_none(index) == {EDITED: "indexed", UNTOUCHED: "indexed"}
    untouched = [sorted(row["chunk_id"] for row in found[UNTOUCHED]) for found in (before, after)]
    assert untouched[0] == untouched[1]

    # The watcher's runs: flow runs of `ingest` (not of the deployment), tagged `watch`, named
    # for what started them, the changed paths as their parameter.
    watched = {"flow_runs": {"tags": {"all_": ["watch"]}}}
    runs = http.post("/flow_runs/filter", json=watched).json()
    assert {run["deployment_id"] for run in runs} == {None}
    (reconcile,) = [run for run in runs if run["parameters"]["paths"] is None]
    assert reconcile["name"] == "watch: reconcile"
    changes = [run for run in runs if run["parameters"]["paths"] is not None]
    assert {path for run in changes for path in run["parameters"]["paths"]} == {EDITED, DELETED}
    assert all(re.fullmatch(r"watch: \d+ changed paths", run["name"]) for run in changes)
