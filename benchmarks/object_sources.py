"""Ingest from an object store against the same files in a local folder (issue 38).

    .venv/bin/python -m benchmarks.object_sources [--objects N] [--libraries DIR] [--smoke]

Writes N small Markdown files (default 10,000, in folders of 100) to a local folder and to a
bucket of moto's S3 server (in this process, on 127.0.0.1). Then, each a whole command from
process start to exit (`python -m flows.ingest SOURCE --index … --model hash`: the hash model,
so that the source, not the model, is measured), with a fresh Prefect home: the folder's first
run and no-change run, then the bucket's (`s3://…`, reached through the standard AWS_*
variables). Prints seconds, the ratio bucket/folder, the peak RSS of the command's process tree
and of its own process, and the GET requests of object bodies the server answered during each
run; then one JSON line.

`--libraries DIR` also times the two candidate libraries listing the bucket and reading every
object's bytes, each in a child process: obstore (as tasks/ingest/object_sources.py does it:
one streamed listing, FETCHERS threads of GETs) and s3fs (`find`, then `cat` of every path, its
own concurrent reads); DIR holds s3fs (`pip install --target DIR s3fs`: it pins its own
botocore, so it stays out of the project's environment).

moto is a Python server: a request costs it more than S3 costs, so the bucket's figures are an
upper bound. `--smoke`: 20 objects.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.support.processes import PeakTreeRss, mib
from benchmarks.support.s3 import CountingMotoServer

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "bench-sources"
PREFIX = "notes"
PER_FOLDER = 100
WORDS = (
    "river stone lantern orchard harbour meadow glacier copper violin canyon ember tide "
    "quarry falcon willow basalt prairie beacon thistle marble"
).split()


def note(number: int) -> bytes:
    """A small Markdown note, different for every number (a few hundred bytes)."""
    words = [WORDS[(number * 7 + i * 3) % len(WORDS)] for i in range(40)]
    body = " ".join(words).capitalize()
    return f"# Note {number}\n\n{body}, number {number}.\n".encode()


def key(number: int) -> str:
    return f"d{number // PER_FOLDER:03d}/n{number:05d}.md"


def write_corpus(count: int, folder: Path, server: CountingMotoServer) -> None:
    """The notes in `folder` and under PREFIX in the bucket (not timed)."""
    client = server.client()
    client.create_bucket(Bucket=BUCKET)

    def put(number: int) -> None:
        path = folder / key(number)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(note(number))
        client.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{key(number)}", Body=note(number))

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, range(count)))


def ingest(source: str, index: Path, env: dict[str, str], server: CountingMotoServer) -> dict:
    """One whole `flows.ingest` command: seconds, peak RSS, its counts and the object GETs."""
    server.gets.clear()
    command = [sys.executable, "-m", "flows.ingest", source, "--index", str(index)]
    started = time.perf_counter()
    process = subprocess.Popen(
        [*command, "--model", "hash"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with PeakTreeRss(pid=process.pid) as peaks:
        out, err = process.communicate()
    seconds = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({process.returncode}):\n{err[-3000:]}")
    counts = re.search(r"files: (\d+) seen, (\d+) indexed, (\d+) unchanged", out)
    if counts is None:
        raise SystemExit(f"no summary in the output of {' '.join(command)}:\n{out}")
    seen, indexed, unchanged = map(int, counts.groups())
    return {
        "seconds": round(seconds, 2),
        "peak_tree_mib": mib(peaks.peak),
        "peak_own_mib": max(peaks.own_peak_by_quarter(), default=0.0),
        "seen": seen,
        "indexed": indexed,
        "unchanged": unchanged,
        "object_gets": sum(server.gets.values()),
    }


def read_all(library: str, endpoint: str) -> dict[str, Any]:
    """List the bucket's PREFIX and read every object's bytes with `library` (run in a child
    process): seconds for each step, objects and bytes."""
    started = time.perf_counter()
    if library == "obstore":
        import obstore

        from tasks.dataset.object_store import open_store
        from tasks.ingest.object_sources import FETCHERS, LIST_PAGE

        store = open_store(f"s3://{BUCKET}/{PREFIX}")
        keys = [m["path"] for page in obstore.list(store, chunk_size=LIST_PAGE) for m in page]
        listed = time.perf_counter()
        with ThreadPoolExecutor(FETCHERS) as pool:
            sizes = list(pool.map(lambda k: len(obstore.get(store, k).bytes()), keys))
    else:
        import s3fs

        fs = s3fs.S3FileSystem(endpoint_url=endpoint)
        keys = fs.find(f"{BUCKET}/{PREFIX}")
        listed = time.perf_counter()
        sizes = [len(body) for body in fs.cat(keys).values()]
    read = time.perf_counter()
    return {
        "library": library,
        "objects": len(keys),
        "bytes": sum(sizes),
        "list_s": round(listed - started, 2),
        "read_s": round(read - listed, 2),
    }


def time_library(library: str, env: dict[str, str], path: str | None) -> dict[str, Any]:
    """`read_all` in a child process (s3fs with `path` first on its import path)."""
    child = dict(env)
    if path:
        child["PYTHONPATH"] = os.pathsep.join(filter(None, [path, env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.object_sources", "--read-all", library],
        cwd=ROOT,
        env=child,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise SystemExit(f"reading with {library} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.object_sources")
    parser.add_argument("--objects", type=int, default=10_000, help="how many notes")
    parser.add_argument("--libraries", metavar="DIR", help="also time obstore and s3fs (in DIR)")
    parser.add_argument("--smoke", action="store_true", help="20 notes")
    parser.add_argument("--read-all", choices=("obstore", "s3fs"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.read_all:  # the child process of time_library
        print(json.dumps(read_all(args.read_all, os.environ["AWS_ENDPOINT_URL"])))
        return 0
    count = 20 if args.smoke else args.objects

    work = Path(tempfile.mkdtemp(prefix="doc-indexer-object-sources-"))
    server = CountingMotoServer()
    server.start()
    try:
        folder = work / "folder"
        started = time.perf_counter()
        write_corpus(count, folder, server)
        print(
            f"{count} notes written to a folder and to s3://{BUCKET}/{PREFIX} in "
            f"{time.perf_counter() - started:.1f} s (not timed below)"
        )
        env = {**os.environ, **server.aws_variables(), "PREFECT_HOME": str(work / "prefect")}
        env.pop("DOC_INDEXER_STORAGE_OPTIONS", None)  # the standard variables only
        runs = {}
        for label, source in (("folder", str(folder)), ("bucket", f"s3://{BUCKET}/{PREFIX}")):
            index = work / f"index-{label}"
            runs[f"{label} first"] = ingest(source, index, env, server)
            runs[f"{label} no change"] = ingest(source, index, env, server)
        libraries = (
            [
                time_library(name, env, args.libraries if name == "s3fs" else None)
                for name in ("obstore", "s3fs")
            ]
            if args.libraries
            else []
        )
    finally:
        server.stop()

    print(f"run{'':<14}seconds  ratio  peak RSS tree/own MiB  seen indexed unchanged  GETs")
    for label, run in runs.items():
        base = runs[label.replace("bucket", "folder")]["seconds"]
        print(
            f"{label:<17} {run['seconds']:>7.1f} {run['seconds'] / base:>6.2f}  "
            f"{run['peak_tree_mib']:>10.0f} / {run['peak_own_mib']:<8.0f}  "
            f"{run['seen']:>5} {run['indexed']:>7} {run['unchanged']:>9}  {run['object_gets']:>5}"
        )
    for result in libraries:
        print(
            f"{result['library']:<8} list {result['list_s']:.2f} s, read {result['objects']} "
            f"objects ({result['bytes']} bytes) {result['read_s']:.2f} s"
        )
    print(json.dumps({"objects": count, "runs": runs, "libraries": libraries}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
