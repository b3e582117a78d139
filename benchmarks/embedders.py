"""Embedding speed of each backend, and of the per-token backend's worker threads, on real chunks.

    .venv/bin/python -m benchmarks.embedders [DIR] [--limit N] [--specs SPEC ...]
                                             [--workers N ...] [--smoke]

DIR (default ../shared/corpus/md/rust-book) is loaded and split as an ingest run would (the
default splitter, the bundled model's tokenizer); the first `--limit` chunks (default 600)
are encoded by each spec after a short warm-up, in one `encode` call as the embed step
makes. `--workers` repeats the per-token int8 backend of the bundled model (the default dual
model's Latin half) with that many worker threads (DOC_INDEXER_EMBED_WORKERS). Prints
chunks/s per run, then one JSON line. ONNX files must be prepared (`make install`); torch
runs with its default threads.

`--smoke` encodes the first SMOKE_LIMIT chunks of data/sample/rust-book (no ../shared) by
each spec, and the per-token backend with 2 worker threads unless `--workers` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tasks.embed.models import (
    BUNDLED_MODEL,
    DEFAULT_MODEL,
    get_embedder,
    model_info,
    resolve_model,
)
from tasks.embed.onnx_files import onnx_file
from tasks.embed.token_backend import TokenInt8Embedder
from tasks.ingest.discover import discover
from tasks.ingest.load import LoadSettings, load_batch
from tasks.ingest.steps import split_batch
from tasks.text.split import SplitSettings

ROOT = Path(__file__).resolve().parents[1]
TOKEN_MODEL = f"onnx-int8-token:{BUNDLED_MODEL}"  # the default's Latin half, for --workers
SMOKE_FOLDER = ROOT / "data" / "sample" / "rust-book"
SMOKE_LIMIT = 16
SMOKE_WORKERS = [2]
SPECS = (
    DEFAULT_MODEL,
    BUNDLED_MODEL,
    f"onnx:{BUNDLED_MODEL}",
    f"onnx-int8:{BUNDLED_MODEL}",
)


def chunk_texts(folder: Path, limit: int) -> list[str]:
    documents = load_batch(list(discover(str(folder)).files), LoadSettings())
    results = split_batch(documents, SplitSettings(), DEFAULT_MODEL)
    return [chunk.text for result in results for chunk in result.chunks][:limit]


def rate(encode: object, texts: list[str]) -> float:
    """Chunks per second of one encode call over `texts`, after a warm-up call."""
    assert callable(encode)
    encode(texts[:8])
    started = time.perf_counter()
    encode(texts)
    return len(texts) / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.embedders")
    default_dir = ROOT.parent / "shared" / "corpus" / "md" / "rust-book"
    parser.add_argument("folder", nargs="?", default=str(default_dir))
    parser.add_argument("--limit", type=int, default=600)
    parser.add_argument("--specs", nargs="*", default=list(SPECS))
    parser.add_argument("--workers", nargs="*", type=int, default=[])
    parser.add_argument(
        "--smoke", action="store_true", help=f"{SMOKE_LIMIT} chunks of data/sample, in seconds"
    )
    args = parser.parse_args()
    if args.smoke:
        args.folder, args.limit = str(SMOKE_FOLDER), SMOKE_LIMIT
        args.workers = args.workers or SMOKE_WORKERS
    if not Path(args.folder).is_dir():
        print(f"skipped: {args.folder} not found")
        return 0
    texts = chunk_texts(Path(args.folder), args.limit)
    print(f"{len(texts)} chunks of {args.folder}", flush=True)
    report: dict[str, float] = {}
    for spec in args.specs:
        report[spec] = rate(get_embedder(spec).encode, texts)
        print(f"{spec:<40} {report[spec]:7.1f} chunks/s", flush=True)
    if args.workers:
        info = model_info(TOKEN_MODEL)
        path = Path(resolve_model(BUNDLED_MODEL)[0])
        for workers in args.workers:
            embedder = TokenInt8Embedder(onnx_file(path, "int8-token"), path, info, workers)
            label = f"{TOKEN_MODEL} workers={workers}"
            report[label] = rate(embedder.encode, texts)
            print(f"{label:<40} {report[label]:7.1f} chunks/s", flush=True)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
