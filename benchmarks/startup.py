"""Wall time of `python -m flows.query` commands, next to the import floor.

    .venv/bin/python -m benchmarks.startup [--index URI] [--runs N]

Each command runs N times (default 5) in a fresh interpreter; the median is printed:
the floor `python -c "import prefect, lancedb"`, `--help`, `--stats`, `--sources`, a missing
dataset, and one question, first with no Prefect server (the flow starts a temporary one, as
a user without a server gets) and then against a `prefect server start` that this script
runs on a free 127.0.0.1 port with its own home folder. The dataset defaults to data/index
(`make demo` builds it). Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tasks.store import DEFAULT_INDEX_URI

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "How do references and borrowing work in Rust?"


def _median_seconds(args: list[str], env: dict[str, str], runs: int) -> float:
    """Median wall time of `python args...` over `runs` runs; fails loudly on a crash."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        result = subprocess.run(
            [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True
        )
        times.append(time.perf_counter() - start)
        if result.returncode not in (0, 1):
            raise SystemExit(f"{args} exited {result.returncode}:\n{result.stderr[-2000:]}")
    return statistics.median(times)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_server(home: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """`prefect server start` on a free port; returns the process and its API URL."""
    port = _free_port()
    server_env = {**env, "PREFECT_HOME": str(home), "PREFECT_SERVER_UI_ENABLED": "false"}
    server = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1"]
        + ["--port", str(port)],
        cwd=ROOT,
        env=server_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    api = f"http://127.0.0.1:{port}/api"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{api}/health", timeout=2, trust_env=False).status_code == 200:
                return server, api
        except httpx.HTTPError:
            time.sleep(0.5)
    server.kill()
    raise SystemExit("prefect server did not answer /health within 180 s")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.startup")
    parser.add_argument("--index", default=DEFAULT_INDEX_URI)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if not Path(args.index).exists():
        raise SystemExit(f"no dataset at {args.index}: run `make demo` first, or pass --index")
    work = Path(tempfile.mkdtemp(prefix="doc-indexer-startup-"))
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    query = ["-m", "flows.query", "--index", args.index]
    commands = {
        "floor: import prefect, lancedb": ["-c", "import prefect, lancedb"],
        "query --help": ["-m", "flows.query", "--help"],
        "query --stats": [*query, "--stats"],
        "query --sources": [*query, "--sources"],
        "query, missing dataset": ["-m", "flows.query", "x", "--index", str(work / "none")],
        "query, no server running": [*query, QUESTION],
    }
    result = {name: _median_seconds(argv, env, args.runs) for name, argv in commands.items()}
    server, api = _start_server(work / "server-home", env)
    try:
        with_server = {**env, "PREFECT_API_URL": api}
        result["query, server running"] = _median_seconds(
            [*query, QUESTION], with_server, args.runs
        )
    finally:
        server.terminate()
        server.wait(30)
    result = {name: round(seconds, 2) for name, seconds in result.items()}
    width = max(map(len, result))
    print(f"median wall seconds over {args.runs} runs")
    for name, seconds in result.items():
        print(f"{name:<{width}}  {seconds:6.2f}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
