"""A scheduled no-change ingest as `deployments.serve` runs it, against a running Prefect server.

    .venv/bin/python -m benchmarks.served_run [--corpus DIR] [--index URI] [--runs N] [--smoke]

Starts a `prefect server start` on a free 127.0.0.1 port with its own home folder (as
benchmarks/startup.py does), then `python -m deployments.serve` on the corpus and its
dataset, and triggers the `ingest/<name>` deployment N times (default 5) one after the
other, each once the one before has ended: what a cron run of an unchanged folder costs.
For every run it prints, from the run's own record in the API:

- `process s`: from the runner taking the run (its Pending state) to the run's end: the
  subprocess the runner starts, its imports and the flow, what the schedule spends per run;
- `flow s`: the flow alone, from its Running state to its end;
- `picked up after s`: from the trigger to Pending, which is the runner's polling interval
  (PREFECT_RUNNER_POLL_FREQUENCY, 10 s by default), not doc-indexer's.

The dataset is built first when missing (default: the one benchmarks/startup.py uses). Prints
a table, the medians and one JSON line.

`--smoke`: one run on benchmarks/startup.py's SMOKE_FILES copied to a temporary folder (no
../shared), against the server PREFECT_API_URL names when it is set (a test's) instead of a
new one, with no settling wait and the runner polling every second.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from datetime import datetime

import httpx

from benchmarks.startup import (
    ROOT,
    SERVER_SETTLES_S,
    _load,
    _start_server,
    prepare,
)

NAME = "bench"
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}
RUN_LIMIT_S = 600  # a no-change run takes seconds


def _api(api: str, method: str, path: str, **kwargs: object) -> dict:
    """One API call; a 503 (the server's SQLite database busy) is tried again, up to 10 times."""
    for _ in range(10):
        response = httpx.request(method, f"{api}{path}", timeout=30, trust_env=False, **kwargs)
        if response.status_code != 503:
            break
        time.sleep(1)
    response.raise_for_status()
    return response.json()


def _deployment_id(api: str, serving: subprocess.Popen, deadline_s: float = 300) -> str:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline and serving.poll() is None:
        try:
            return _api(api, "GET", f"/deployments/name/ingest/{NAME}")["id"]
        except httpx.HTTPError:
            time.sleep(1)
    raise SystemExit("deployments.serve registered no ingest deployment")


def _one_run(api: str, deployment: str, serving: subprocess.Popen) -> dict[str, float | str]:
    """Trigger the deployment once and wait for the run to end; its timings from the API.
    Stops the benchmark when the run does not complete within RUN_LIMIT_S."""
    triggered = time.time()
    run = _api(api, "POST", f"/deployments/{deployment}/create_flow_run", json={})
    deadline = time.monotonic() + RUN_LIMIT_S
    while run["state_type"] not in TERMINAL:
        if time.monotonic() > deadline or serving.poll() is not None:
            raise SystemExit(
                f"run {run['id']} did not end (deployments.serve running: {serving.poll() is None})"
            )
        time.sleep(0.2)
        run = _api(api, "GET", f"/flow_runs/{run['id']}")
    if run["state_type"] != "COMPLETED":
        raise SystemExit(f"run {run['id']} ended {run['state_type']}: {run['state']['message']}")
    states = _api(api, "GET", "/flow_run_states/", params={"flow_run_id": run["id"]})
    pending = min(_timestamp(st["timestamp"]) for st in states if st["type"] == "PENDING")
    end = _timestamp(run["end_time"])
    return {
        "state": run["state_type"],
        "process s": end - pending,
        "flow s": end - _timestamp(run["start_time"]),
        "picked up after s": pending - triggered,
    }


def _timestamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def main() -> int:
    bench = prepare("benchmarks.served_run", "one run on one file of data/sample")
    if bench is None:
        return 0
    args, home, corpus, index, env, running = bench
    server, api = (None, running) if running else _start_server(home / "server-home", env)
    served_env = {**env, "PREFECT_API_URL": api}
    if args.smoke:
        served_env["PREFECT_RUNNER_POLL_FREQUENCY"] = "1"
    serving = subprocess.Popen(
        [sys.executable, "-m", "deployments.serve", "--source", str(corpus)]
        + ["--index", str(index), "--name", NAME, "--cron", "0 0 1 1 *"],  # due once a year
        cwd=ROOT,
        env=served_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deployment = _deployment_id(api, serving)
        _one_run(api, deployment, serving)  # the first run registers what later runs find
        time.sleep(0 if args.smoke else SERVER_SETTLES_S)
        load_at_start = _load()
        runs = [_one_run(api, deployment, serving) for _ in range(args.runs)]
    finally:
        serving.terminate()
        serving.wait(60)
        if server is not None:
            server.terminate()
            server.wait(30)
    print(
        f"no-change ingest runs of deployment ingest/{NAME} served by deployments.serve; corpus "
        f"{corpus}; load average {load_at_start} at the start, {_load()} at the end"
    )
    columns = ("process s", "flow s", "picked up after s")
    print(f"{'run':>6}  {'state':<10}" + "".join(f"  {key:>17}" for key in columns))
    for number, run in enumerate(runs, 1):
        print(f"{number:>6}  {run['state']:<10}" + "".join(f"  {run[k]:17.2f}" for k in columns))
    medians = {key: round(statistics.median(float(run[key]) for run in runs), 2) for key in columns}
    print(f"{'median':>6}  {'':<10}" + "".join(f"  {medians[k]:17.2f}" for k in columns))
    print(json.dumps({"load_average_start": load_at_start, "runs": runs, "medians": medians}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
