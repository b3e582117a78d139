"""Wall time of the everyday commands, from process start to exit, next to the import floors.

    .venv/bin/python -m benchmarks.startup [--corpus DIR] [--index URI] [--runs N] [--smoke]

Every command runs N times (default 5) in a fresh interpreter and the median is printed:

- the floors `python -c "import prefect, lancedb"` and `python -c "import onnxruntime, tokenizers"`;
- `flows.query --help`, `--stats`, `--sources`;
- one question in the default mode and in `--mode fts`, and a no-change re-run of
  `flows.ingest` on the corpus, each first with no Prefect server running (what a user without
  a server gets) and then against a `prefect server start` that this script runs on a free
  127.0.0.1 port with its own home folder;
- the same question from a folder outside the repository, no server.

The corpus defaults to ../shared/corpus/md/rust-book; its dataset is built once under
.cache/bench/ (or taken from --index). Only command lines are run, so the script measures
any version of the code. Prints a table and one JSON line.

`--smoke` runs once each of SMOKE_COMMANDS (one of the plain commands, one of those timed
without and with a server) and the question from another folder, on SMOKE_FILES of data/sample
copied to a temporary folder (its dataset there too; no ../shared): every step of the script in
seconds. It builds the dataset and times the server-running command against the server
PREFECT_API_URL names when it is set (a test's) instead of starting one.
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

import httpx

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus" / "md" / "rust-book"
QUESTION = "How do references and borrowing work in Rust?"
SMOKE_FILES = (ROOT / "data" / "sample" / "rust-book" / "ch04-02-references-and-borrowing.md",)
SMOKE_COMMANDS = ("query --stats", "query, --mode fts")  # --smoke: one of each group


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


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.startup")
    parser.add_argument("--corpus", default=str(CORPUS), help="folder indexed for the runs")
    parser.add_argument("--index", help="its dataset (default: built under .cache/bench/)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--smoke", action="store_true", help="SMOKE_COMMANDS once on one file of data/sample"
    )
    args = parser.parse_args()
    elsewhere = Path(tempfile.mkdtemp(prefix="doc-indexer-startup-"))
    if args.smoke:
        args.runs, args.corpus = 1, str(elsewhere / "smoke-corpus")
        args.index = args.index or str(elsewhere / "smoke-index")
        Path(args.corpus).mkdir()
        for path in SMOKE_FILES:
            shutil.copyfile(path, Path(args.corpus) / path.name)
    corpus = Path(args.corpus).resolve()
    if not corpus.is_dir():
        print(f"skipped: corpus not found: {corpus} (../shared is not present)")
        return 0
    index = Path(args.index or ROOT / ".cache" / "bench" / f"{corpus.name}-index").resolve()
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    # --smoke: the server that PREFECT_API_URL names (a test's), when set, instead of a new one
    running = os.environ.get("PREFECT_API_URL") if args.smoke else None
    ingest = ["-m", "flows.ingest", str(corpus), "--index", str(index)]
    if not index.exists():
        print(f"building {index} from {corpus} …", file=sys.stderr, flush=True)
        _run(ingest, {**env, "PREFECT_API_URL": running} if running else env)
    query = ["-m", "flows.query", "--index", str(index)]
    commands = {
        "floor: import prefect, lancedb": ["-c", "import prefect, lancedb"],
        "floor: import onnxruntime, tokenizers": ["-c", "import onnxruntime, tokenizers"],
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
    result = {name: _median(argv, env, args.runs) for name, argv in commands.items()}
    for name, argv in with_server.items():
        result[f"{name}, no server"] = _median(argv, env, args.runs)
    # From another folder: `python -m` needs the project on the path, as an installed package.
    result["query, default mode, no server, another folder"] = _median(
        [*query, QUESTION], {**env, "PYTHONPATH": str(ROOT)}, args.runs, cwd=elsewhere
    )
    server, api = (None, running) if running else _start_server(elsewhere / "server-home", env)
    try:
        for name, argv in with_server.items():
            result[f"{name}, server running"] = _median(
                argv, {**env, "PREFECT_API_URL": api}, args.runs
            )
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
    result = {name: round(seconds, 2) for name, seconds in result.items()}
    width = max(map(len, result))
    print(f"median wall seconds over {args.runs} runs; corpus {corpus}")
    for name, seconds in result.items():
        print(f"{name:<{width}}  {seconds:6.2f}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
