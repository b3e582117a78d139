"""Ingest throughput next to raw model throughput, measured in one process.

    .venv/bin/python -m benchmarks.ingest [DIR] [--batch-size N] [--generate-md N]

1. a first ingest of DIR (default data/sample) through the real flow into a fresh dataset, with a
   fresh Prefect home so that no cached result is reused; with --generate-md N, DIR is instead
   a generated set of N Markdown files made from ../shared/corpus/md (every line of copy k ends
   with "(copy k)", so no chunk text repeats and nothing is reused);
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


def generate_markdown(count: int, target: Path) -> Path:
    """`count` Markdown files cycled from the shared corpus, each line made unique per copy."""
    sources = sorted((ROOT.parent / "shared" / "corpus" / "md").rglob("*.md"))
    sources = [p for p in sources if p.stat().st_size > 2000]
    if not sources:
        raise SystemExit("../shared/corpus/md not found: cannot generate the Markdown set")
    target.mkdir(parents=True)
    for k in range(count):
        lines = sources[k % len(sources)].read_text("utf-8").splitlines()
        text = "\n".join(f"{line} (copy {k})" if line.strip() else line for line in lines)
        (target / f"{k:05d}-{sources[k % len(sources)].name}").write_text(text, "utf-8")
    return target


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ingest")
    parser.add_argument("source_dir", nargs="?", default=str(ROOT / "data" / "sample"))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--generate-md", type=int, metavar="N", help="ingest N generated .md files")
    args = parser.parse_args()
    uri = str(WORK / "index")
    if args.generate_md:
        args.source_dir = str(generate_markdown(args.generate_md, WORK / "md-set"))

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
        # the largest finished child: the parser process, or the Prefect server
        "peak_rss_child_mib": round(
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1
        ),
    }
    width = max(map(len, result))
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
