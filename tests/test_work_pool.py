"""`prefect.yaml`: the deployments of deployments/serve.py on a process work pool.

The first test reads prefect.yaml and checks that it declares what `deployments.serve` builds
with its defaults (parameters, schedule, concurrency, description, tags): the two are kept
apart (one a Python process, one a file for `prefect deploy`) and must not drift. The second
starts a real `prefect server start`, creates the process work pool, runs `prefect deploy
--all` from the project root, triggers an ingest run on a small folder and lets a real
`prefect worker start --pool … --run-once` run it to Completed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import lancedb
import pytest
import yaml

from deployments.serve import DEFAULT_SOURCE, build_deployments
from tasks.dataset.location import DEFAULT_INDEX_URI
from tasks.dataset.schema import CHUNKS_TABLE, DOCUMENTS_TABLE
from tasks.parse.worker import WORKERS_ENV

from .commands import run_module
from .conftest import ROOT, SMALL_CORPUS_FILES
from .servers import prefect_server, start, stop, tail, wait_for

PREFECT_YAML = ROOT / "prefect.yaml"
PROJECT = "{{ project.stdout }}"  # the project's path where `prefect deploy` runs
POOL = "doc-indexer"
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}
RUN_S = 120  # from trigger to a terminal state


def declared() -> list[dict[str, Any]]:
    """prefect.yaml's deployments with the project's path where `prefect deploy` puts it."""
    text = PREFECT_YAML.read_text(encoding="utf-8").replace(PROJECT, str(ROOT))
    return yaml.safe_load(text)["deployments"]


def test_prefect_yaml_declares_what_serve_builds():
    built = build_deployments(str(DEFAULT_SOURCE.resolve()), str(Path(DEFAULT_INDEX_URI).resolve()))
    expected = [
        {
            "name": d.name,
            "entrypoint": d.entrypoint,
            "description": d.description,
            "tags": d.tags,
            "parameters": d.parameters,
            "schedules": [{"cron": s.schedule.cron} for s in d.schedules],
            "concurrency_limit": None
            if d.concurrency_limit is None
            else {
                "limit": d.concurrency_limit,
                "collision_strategy": d.concurrency_options.collision_strategy.value,
            },
        }
        for d in built
    ]
    found = [{key: d.get(key) for key in expected[0]} for d in declared()]
    assert found == expected
    assert {d["work_pool"]["name"] for d in declared()} == {POOL}
    with open(PREFECT_YAML, encoding="utf-8") as handle:
        config = yaml.safe_load(handle)
    # The code is used in place: nothing cloned, pushed or pulled from elsewhere.
    assert config["pull"] == [
        {"prefect.deployments.steps.set_working_directory": {"directory": PROJECT}}
    ]
    assert config["push"] is None


@pytest.mark.integration
def test_deployed_ingest_runs_on_a_worker_to_completed(tmp_path, small_corpus):
    index = tmp_path / "index"
    with prefect_server(tmp_path / "server") as server:
        env = {**server.env, WORKERS_ENV: "1", "PREFECT_WORKER_QUERY_SECONDS": "1"}

        def prefect(*args: str) -> str:
            done = run_module("prefect", *args, env=env, cwd=ROOT, timeout=120)
            assert done.returncode == 0, f"prefect {' '.join(args)}:\n{done.stdout}{done.stderr}"
            return done.stdout

        prefect("work-pool", "create", POOL, "--type", "process")
        prefect("--no-prompt", "deploy", "--all")

        deployment = server.http.get("/deployments/name/ingest/reindex").json()
        assert deployment["work_pool_name"] == POOL
        assert deployment["parameters"] == {
            "source_dir": str(ROOT / "data" / "sample"),
            "index_uri": str(ROOT / "data" / "index"),
        }
        assert [s["schedule"]["cron"] for s in deployment["schedules"]] == ["0 * * * *"]
        assert deployment["global_concurrency_limit"]["limit"] == 1
        assert deployment["concurrency_options"]["collision_strategy"] == "ENQUEUE"
        assert deployment["pull_steps"] == [
            {"prefect.deployments.steps.set_working_directory": {"directory": str(ROOT)}}
        ]
        for flow in ("query", "audit"):
            other = server.http.get(f"/deployments/name/{flow}/reindex")
            assert other.status_code == 200 and other.json()["work_pool_name"] == POOL

        # A run of the deployment on another folder and dataset, with the hashing embedder
        # (no model to load); the worker started after it picks it up in its one poll.
        output = prefect(
            "deployment",
            "run",
            "ingest/reindex",
            "-p",
            f"source_dir={small_corpus}",
            "-p",
            f"index_uri={index}",
            "-p",
            "model=hash",
        )
        run_id = output.split("UUID:")[1].split()[0]
        log = tmp_path / "worker.log"
        worker = start(
            [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL, "--run-once"],
            env,
            log,
        )
        try:

            def finished() -> dict | None:
                run = server.http.get(f"/flow_runs/{run_id}").json()
                return run if run["state"]["type"] in TERMINAL else None

            run = wait_for(finished, RUN_S, f"flow run {run_id} to finish", interval=0.5)
            assert run["state"]["type"] == "COMPLETED", f"{run['state']}\n{tail(log)}"
            assert run["work_pool_name"] == POOL
        finally:
            stop(worker)

    db = lancedb.connect(str(index))
    ledger = db.open_table(DOCUMENTS_TABLE).to_arrow().to_pylist()
    expected = {*SMALL_CORPUS_FILES, "r-manuals/R-FAQ-excerpt.pdf"}
    assert {row["doc_id"]: row["status"] for row in ledger} == dict.fromkeys(expected, "indexed")
    chunks = db.open_table(CHUNKS_TABLE).to_arrow().column("doc_id").to_pylist()
    assert set(chunks) == expected
