"""Embedding speed of each backend, and of the per-token backend's worker threads, on real chunks.

    .venv/bin/python -m benchmarks.embedders [DIR] [--limit N] [--specs SPEC ...]
                                             [--workers N ...] [--parts] [--smoke]

DIR (default ../shared/corpus/md/rust-book) is loaded and split as an ingest run would (the
default splitter, the bundled model's tokenizer); the first `--limit` chunks (default 600)
are encoded by each spec after a short warm-up, in one `encode` call as the embed step
makes. `--workers` repeats the per-token int8 backend of the bundled model (the default dual
model's Latin half) with that many worker threads (DOC_INDEXER_EMBED_WORKERS). Prints
chunks/s per run and the CPU time the process spent on it per chunk (all threads; steadier
than wall time on a shared machine), then one JSON line of chunks/s. ONNX files must be
prepared (`make install`); torch runs with its default threads.

`--parts` first times the default dual model's parts with one worker each, in CPU seconds:
the multilingual model's SentencePiece pieces and its forward pass (numpy; flat
micro-batches, so no padding), the English model's word pieces and its onnxruntime passes
(one text each, so no padding either).

`--smoke` encodes the first SMOKE_LIMIT chunks of data/sample/rust-book (no ../shared) by
each spec, and the per-token backend with 2 worker threads unless `--workers` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tasks.embed.dual_backend import reads_english
from tasks.embed.models import (
    BUNDLED_MODEL,
    DEFAULT_MODEL,
    get_embedder,
    model_info,
    resolve_model,
)
from tasks.embed.onnx_files import onnx_file
from tasks.embed.token_backend import TokenInt8Embedder
from tasks.embed.use_backend import UseEmbedder
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


def rate(encode: Callable[[list[str]], np.ndarray], texts: list[str]) -> tuple[float, float]:
    """Chunks per second of one encode call over `texts`, after a warm-up call, and the CPU
    milliseconds per chunk the process spent on it (every thread)."""
    encode(texts[:8])
    started, cpu = time.perf_counter(), time.process_time()
    encode(texts)
    wall, used = time.perf_counter() - started, time.process_time() - cpu
    return len(texts) / wall, 1000 * used / len(texts)


def cpu_seconds(step: Callable[[], object]) -> float:
    """CPU seconds the process spent on `step()` (every thread)."""
    started = time.process_time()
    step()
    return time.process_time() - started


def parts(texts: list[str]) -> dict[str, float]:
    """CPU seconds of each part of the default dual model over `texts`, one worker each: a
    part's forward pass is its whole encode less its tokenisation."""
    latin = [text for text in texts if reads_english(text)]
    use = UseEmbedder(1)
    info = model_info(TOKEN_MODEL)
    path = Path(resolve_model(BUNDLED_MODEL)[0])
    english = TokenInt8Embedder(onnx_file(path, "int8-token"), path, info, 1)
    use.encode(texts[:8])
    english.encode(latin[:8])
    pieces = cpu_seconds(lambda: use.count_tokens(texts))
    use_whole = cpu_seconds(lambda: use.encode(texts))
    word_pieces = cpu_seconds(lambda: english.count_tokens(latin))
    english_whole = cpu_seconds(lambda: english.encode(latin))
    return {
        "multilingual: SentencePiece pieces": pieces,
        "multilingual: forward pass (numpy)": use_whole - pieces,
        "English: word pieces (tokenizers)": word_pieces,
        "English: onnxruntime passes": english_whole - word_pieces,
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.embedders")
    default_dir = ROOT.parent / "shared" / "corpus" / "md" / "rust-book"
    parser.add_argument("folder", nargs="?", default=str(default_dir))
    parser.add_argument("--limit", type=int, default=600)
    parser.add_argument("--specs", nargs="*", default=list(SPECS))
    parser.add_argument("--workers", nargs="*", type=int, default=[])
    parser.add_argument("--parts", action="store_true", help="CPU time of the default's parts")
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
    if args.parts:
        found = parts(texts)
        for part, seconds in found.items():
            share = seconds / sum(found.values())
            print(f"{part:<40} {seconds:7.2f} CPU s {share:6.1%}", flush=True)
    report: dict[str, float] = {}

    def show(label: str, measured: tuple[float, float]) -> None:
        report[label] = measured[0]
        print(
            f"{label:<40} {measured[0]:7.1f} chunks/s {measured[1]:7.1f} CPU ms/chunk", flush=True
        )

    for spec in args.specs:
        show(spec, rate(get_embedder(spec).encode, texts))
    if args.workers:
        info = model_info(TOKEN_MODEL)
        path = Path(resolve_model(BUNDLED_MODEL)[0])
        for workers in args.workers:
            embedder = TokenInt8Embedder(onnx_file(path, "int8-token"), path, info, workers)
            show(f"{TOKEN_MODEL} workers={workers}", rate(embedder.encode, texts))
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
