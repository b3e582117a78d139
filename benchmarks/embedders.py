"""Embedding speed of each backend, and of the default backend's worker threads, on real chunks.

    .venv/bin/python -m benchmarks.embedders [DIR] [--limit N] [--specs SPEC ...]
                                             [--workers N ...]

DIR (default ../shared/corpus/md/rust-book) is loaded and split as an ingest run would (the
default splitter, the bundled model's tokenizer); the first `--limit` chunks (default 600)
are encoded by each spec after a short warm-up, in one `encode` call as the embed step
makes. `--workers` repeats the default backend (per-token int8) with that many worker
threads (DOC_INDEXER_EMBED_WORKERS). Prints chunks/s per run, then one JSON line. ONNX
files must be prepared (`make install`); torch runs with its default threads.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tasks.embed.models import BUNDLED_MODEL, DEFAULT_MODEL, get_embedder, resolve_model
from tasks.embed.onnx_files import onnx_file
from tasks.embed.token_backend import TokenInt8Embedder
from tasks.ingest.discover import discover
from tasks.ingest.load import LoadSettings, load_batch
from tasks.ingest.steps import split_batch
from tasks.text.split import SplitSettings

ROOT = Path(__file__).resolve().parents[1]
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
    args = parser.parse_args()
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
        default = get_embedder(DEFAULT_MODEL)
        path = Path(resolve_model(BUNDLED_MODEL)[0])
        for workers in args.workers:
            embedder = TokenInt8Embedder(onnx_file(path, "int8-token"), path, default.info, workers)
            label = f"{DEFAULT_MODEL} workers={workers}"
            report[label] = rate(embedder.encode, texts)
            print(f"{label:<40} {report[label]:7.1f} chunks/s", flush=True)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
