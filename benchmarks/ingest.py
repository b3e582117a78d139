"""Ingest throughput next to raw model throughput, measured in one process.

    .venv/bin/python -m benchmarks.ingest [DIR] [--batch-size N]

1. a first ingest of DIR (default data/sample) through the real flow into a fresh dataset, with a
   fresh Prefect home so that no cached result is reused;
2. raw `model.encode` on exactly the chunk texts that run wrote, same model, same batch size;
3. a second, unchanged ingest run.
Prints a table and one JSON line; the ratio is ingest chunks/s over raw encode chunks/s.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

WORK = Path(tempfile.mkdtemp(prefix="doc-indexer-bench-"))
os.environ["PREFECT_HOME"] = str(WORK / "prefect")  # before Prefect is imported: no old caches

import lancedb  # noqa: E402

from flows.ingest import ingest  # noqa: E402
from tasks.embed import DEFAULT_MODEL, get_embedder  # noqa: E402
from tasks.schema import CHUNKS_TABLE  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ingest")
    parser.add_argument("source_dir", nargs="?", default=str(ROOT / "data" / "sample"))
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    uri = str(WORK / "index")

    start = time.perf_counter()
    first = ingest(
        source_dir=str(Path(args.source_dir).resolve()), index_uri=uri, batch_size=args.batch_size
    )
    first_wall = time.perf_counter() - start

    texts = lancedb.connect(uri).open_table(CHUNKS_TABLE).to_arrow().column("text").to_pylist()
    embedder = get_embedder(DEFAULT_MODEL)
    start = time.perf_counter()
    embedder.encode(texts)
    raw_seconds = time.perf_counter() - start

    start = time.perf_counter()
    second = ingest(
        source_dir=str(Path(args.source_dir).resolve()), index_uri=uri, batch_size=args.batch_size
    )
    second_wall = time.perf_counter() - start

    chunks = first.chunks_written
    result = {
        "source_dir": args.source_dir,
        "files": first.files_seen,
        "chunks": chunks,
        "raw_encode_chunks_per_s": round(chunks / raw_seconds, 2),
        "ingest_chunks_per_s": round(chunks / first.seconds, 2),
        "ratio": round(raw_seconds / first.seconds, 3),
        "first_run_flow_s": round(first.seconds, 2),
        "first_run_wall_s": round(first_wall, 2),
        "second_run_flow_s": round(second.seconds, 2),
        "second_run_wall_s": round(second_wall, 2),
        "second_run_unchanged": second.unchanged,
        "stage_seconds": {k: round(v, 2) for k, v in first.stage_seconds.items()},
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    width = max(map(len, result))
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
