"""Wall time of the everyday commands, from process start to exit, next to the import floors.

    .venv/bin/python -m benchmarks.startup [--corpus DIR] [--index URI] [--runs N] [--smoke]

Every command runs N times (default 5) in a fresh interpreter and the median is printed:

- the floors, measured in the same run: `python -c pass` (starting Python), `python -c "import
  lancedb"`, `python -c "import prefect"`, the same two as doc-indexer imports them (`import
  tasks, lancedb`: without LanceDB's REST client, tasks/core/lance_imports.py; `import tasks,
  prefect, lancedb`: what a flow run imports at least) and `python -c "import onnxruntime,
  tokenizers"`;
- `flows.query --help`, `--stats`, `--sources`;
- one question in the default mode and in `--mode fts`, and a no-change re-run of
  `flows.ingest` on the corpus, each first with no Prefect server running (what a user without
  a server gets) and then against a `prefect server start` that this script runs on a free
  127.0.0.1 port with its own home folder;
- the same question from a folder outside the repository, no server;
- the same question while `flows.query --serve` serves the dataset on a free 127.0.0.1 port
  (no Prefect server: the question goes to the service, flows/service_client.py).

Each command's row names the floor it is read against (FLOOR_OF) and the seconds above it, so
that a figure can be read on a machine of any speed; the header gives the load average at the
start and at the end (a busy machine makes every figure larger). The corpus defaults to
../shared/corpus/md/rust-book; its dataset is built once under .cache/bench/ (or taken from
--index). Every command runs with a new Prefect home of the script's own (an earlier run's
task cache would serve its results). Only command lines are run, so the script measures any
version of the code. Prints a table and one JSON line.

`--smoke` runs once each of SMOKE_COMMANDS (one of the plain commands, one of those timed
without and with a server), the question from another folder and with a service running, and
the floors they are read against, on SMOKE_FILES of data/sample copied to a temporary folder
(its dataset there too; no ../shared): every step of the script in seconds. It builds the
dataset and times the server-running command against the server PREFECT_API_URL names when it
is set (a test's) instead of starting one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import httpx

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus" / "md" / "rust-book"
QUESTION = "How do references and borrowing work in Rust?"
SMOKE_FILES = (ROOT / "data" / "sample" / "rust-book" / "ch04-02-references-and-borrowing.md",)
SMOKE_COMMANDS = ("query --stats", "query, --mode fts")  # --smoke: one of each group
FLOORS = {
    "python -c pass": ["-c", "pass"],
    "import lancedb": ["-c", "import lancedb"],
    "import prefect": ["-c", "import prefect"],
    # as doc-indexer imports LanceDB: `tasks` first (tasks/core/lance_imports.py)
    "import tasks, lancedb": ["-c", "import tasks, lancedb"],
    "import tasks, prefect, lancedb": ["-c", "import tasks, prefect, lancedb"],
    "import onnxruntime, tokenizers": ["-c", "import onnxruntime, tokenizers"],
}
SERVICE_ROW = "query, default mode, service running"
# A `prefect server start` is busy for about this long after it first answers (measured: a
# no-change ingest took 4.8, 4.4, 4.0, 3.8, 3.7, 3.6 s back to back from its start).
SERVER_SETTLES_S = 30.0


def floor_of(command: str) -> str:
    """The floor a command is read against: what it cannot avoid importing."""
    if command == "query --help" or command == SERVICE_ROW:
        return "python -c pass"
    if command.endswith("server running") or command.startswith("ingest"):
        return "import tasks, prefect, lancedb"  # a flow run (ingest's on a temporary server)
    return "import tasks, lancedb"


def _run(args: list[str], env: dict[str, str], cwd: Path = ROOT) -> float:
    """Wall seconds of one `python args...`; stops the benchmark on an unexpected exit."""
    start = time.perf_counter()
    result = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True)
    seconds = time.perf_counter() - start
    if result.returncode not in (0, 2):  # 2: an ingest run in which some files failed
        tail = result.stderr.decode(errors="replace")[-2000:]
        raise SystemExit(f"{args} exited {result.returncode}:\n{tail}")
    return seconds


def _median(args: list[str], env: dict[str, str], runs: int, cwd: Path = ROOT) -> float:
    return statistics.median(_run(args, env, cwd) for _ in range(runs))


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


def _start_service(index: Path, env: dict[str, str]) -> subprocess.Popen:
    """`flows.query --serve` on the dataset on a free port, once it answers /health."""
    port = _free_port()
    service = subprocess.Popen(
        [sys.executable, "-m", "flows.query", "--serve", "--index", str(index)]
        + ["--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and service.poll() is None:
        try:
            url = f"http://127.0.0.1:{port}/health"
            if httpx.get(url, timeout=2, trust_env=False).status_code == 200:
                return service
        except httpx.HTTPError:
            time.sleep(0.5)
    service.kill()
    raise SystemExit("the search service did not answer /health within 180 s")


def _load() -> str:
    return " ".join(f"{n:.2f}" for n in os.getloadavg())


class Bench(NamedTuple):
    """What a benchmark of commands on a corpus runs with."""

    args: argparse.Namespace  # --corpus, --index, --runs (1 with --smoke), --smoke
    folder: Path  # a temporary folder of its own
    corpus: Path
    index: Path  # the corpus's dataset, built
    env: dict[str, str]  # this environment without PREFECT_API_URL, a new PREFECT_HOME
    running: str | None  # --smoke: the server PREFECT_API_URL names (a test's), when set


def prepare(module: str, smoke: str) -> Bench | None:
    """Parse a benchmark's command line (--corpus, --index, --runs, --smoke, whose help is
    `smoke`) and build the corpus's dataset where missing (--smoke: of SMOKE_FILES copied to
    a temporary folder); None, said, when the corpus is not there."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}")
    parser.add_argument("--corpus", default=str(CORPUS), help="folder indexed for the runs")
    parser.add_argument("--index", help="its dataset (default: built under .cache/bench/)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help=smoke)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix=f"doc-indexer-{module.rpartition('.')[2]}-"))
    if args.smoke:
        args.runs, args.corpus = 1, str(folder / "smoke-corpus")
        args.index = args.index or str(folder / "smoke-index")
        Path(args.corpus).mkdir()
        for path in SMOKE_FILES:
            shutil.copyfile(path, Path(args.corpus) / path.name)
    corpus = Path(args.corpus).resolve()
    if not corpus.is_dir():
        print(f"skipped: corpus not found: {corpus} (../shared is not present)")
        return None
    index = Path(args.index or ROOT / ".cache" / "bench" / f"{corpus.name}-index").resolve()
    # A Prefect home of its own: an earlier run's task cache would serve its results.
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_HOME"] = str(folder / "prefect-home")
    running = os.environ.get("PREFECT_API_URL") if args.smoke else None
    if not index.exists():
        print(f"building {index} from {corpus} …", file=sys.stderr, flush=True)
        ingest = ["-m", "flows.ingest", str(corpus), "--index", str(index)]
        _run(ingest, {**env, "PREFECT_API_URL": running} if running else env)
    return Bench(args, folder, corpus, index, env, running)


def main() -> int:
    bench = prepare("benchmarks.startup", "SMOKE_COMMANDS once on one file of data/sample")
    if bench is None:
        return 0
    args, elsewhere, corpus, index, env, running = bench
    ingest = ["-m", "flows.ingest", str(corpus), "--index", str(index)]
    query = ["-m", "flows.query", "--index", str(index)]
    commands = {
        "query --help": ["-m", "flows.query", "--help"],
        "query --stats": [*query, "--stats"],
        "query --sources": [*query, "--sources"],
    }
    with_server = {
        "query, default mode": [*query, QUESTION],
        "query, --mode fts": [*query, QUESTION, "--mode", "fts"],
        "ingest, no change": ingest,
    }
    if args.smoke:
        commands = {name: argv for name, argv in commands.items() if name in SMOKE_COMMANDS}
        with_server = {name: argv for name, argv in with_server.items() if name in SMOKE_COMMANDS}
    load_at_start = _load()
    result = {name: _median(argv, env, args.runs) for name, argv in commands.items()}
    for name, argv in with_server.items():
        result[f"{name}, no server"] = _median(argv, env, args.runs)
    # From another folder: `python -m` needs the project on the path, as an installed package.
    result["query, default mode, no server, another folder"] = _median(
        [*query, QUESTION], {**env, "PYTHONPATH": str(ROOT)}, args.runs, cwd=elsewhere
    )
    server, api = (None, running) if running else _start_server(elsewhere / "server-home", env)
    try:
        if server is not None:  # a server that runs, not one starting: its first half minute
            settled = time.monotonic() + SERVER_SETTLES_S  # runs its services' first rounds
            for argv in with_server.values():  # and its first flow runs register the flows
                _run(argv, {**env, "PREFECT_API_URL": api})
            time.sleep(max(0.0, settled - time.monotonic()))
        for name, argv in with_server.items():
            result[f"{name}, server running"] = _median(
                argv, {**env, "PREFECT_API_URL": api}, args.runs
            )
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
    service = _start_service(index, env)
    try:
        result[SERVICE_ROW] = _median([*query, QUESTION], env, args.runs)
    finally:
        service.terminate()
        service.wait(30)
    wanted = {floor_of(name) for name in result} if args.smoke else set(FLOORS)
    floors = {
        name: _median(argv, env, args.runs) for name, argv in FLOORS.items() if name in wanted
    }
    print(
        f"median wall seconds over {args.runs} runs; corpus {corpus}; "
        f"load average {load_at_start} at the start, {_load()} at the end"
    )
    width = max(map(len, [*result, *(f"floor: {name}" for name in floors)]))
    for name, seconds in floors.items():
        print(f"{'floor: ' + name:<{width}}  {seconds:6.2f}")
    print(f"{'command':<{width}}  {'wall s':>6}  {'read against floor':<30}  {'floor':>6}  above")
    for name, seconds in result.items():
        floor = floor_of(name)
        above = seconds - floors[floor]
        print(f"{name:<{width}}  {seconds:6.2f}  {floor:<30}  {floors[floor]:6.2f}  {above:+.2f}")
    report = {
        "load_average": {"start": load_at_start, "end": _load()},
        "floors": {name: round(seconds, 2) for name, seconds in floors.items()},
        "commands": {
            name: {"seconds": round(seconds, 2), "floor": floor_of(name)}
            for name, seconds in result.items()
        },
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
