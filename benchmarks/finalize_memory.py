"""Finalize memory: the peak RSS of each of the finalize's steps, apart, on a big table.

    .venv/bin/python -m benchmarks.finalize_memory [--rows 200000] [--work DIR]
        [--vector JSON ...] [--fts JSON ...] [--variants-only] [--recall [--recall-rows N]]
        [--smoke]

Builds once (kept in --work, reused by later runs with the same --rows) a dataset as the
first ingest of 100,000 generated notes leaves it before its finalize: ROWS chunks, two a
note, of the paragraphs benchmarks/scale.py makes its notes of (../shared/corpus/md), with
the hash embedder's vectors (`hash:384`), written through `Dataset.prepare` and
`Dataset.write_batch` in commits of COMMIT_CHUNKS chunks, as the ingest commits them.

Then each step of `Dataset.finalize` runs in a fresh process (`--step`) on a copy of that
dataset, in the finalize's order on one copy: the full-text index, the vector index, the
optimize pass (compaction, and the scalar key indexes and the other indexes brought up to
date), the cleanup of old versions. Each prints its process's RSS before the step, its peak
(VmHWM, reset just before the step) and seconds. Then the whole `Dataset.finalize` in one
process on a fresh copy, as the ingest runs it, and a later run's finalize on that copy (1%
more notes written first, not measured). `--vector` and `--fts` add runs of that one index
build with other settings, each on a fresh copy (JSON of IvfSq or FTS fields, e.g.
--vector '{"sample_rate": 64}'); with `--variants-only` they are all that runs. Every
process sets tasks.core.memory's bounds first, as an ingest run does; set
LANCE_DEFAULT_FRAGMENT_READAHEAD to try another read-ahead.

`--recall` also measures the vector index's recall@10 against exact search, for the code's
settings and each --vector, on real vectors: the default model's (tasks.embed.models.
DEFAULT_MODEL) of the chunks of ../shared/eval/scifact-train (its 5,183 abstracts, loaded and
split by the ingest's steps; kept in --work), asked with the set's 809 questions through the
searcher's settings (ann.tune), in a table of those vectors alone, or with --recall-rows N of
N rows: the real vectors and noisy copies of them (cosine about 0.85 to their original).

--smoke: 2,000 rows of data/sample/rust-book paragraphs, the same steps, in seconds (with
--recall: the rust-book's chunks and SMOKE_QUESTIONS).
Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa

from benchmarks.scale import HASH_MODEL, NOTE_CHARS, SAMPLE_MD, SHARED_MD, paragraphs
from benchmarks.support.rows import document_chunks
from tasks.core.memory import bound_native_memory, release_free_memory
from tasks.core.records import Chunk, Document, SourceFile, sha256_hex
from tasks.dataset import ann, upkeep
from tasks.dataset.dataset import Dataset
from tasks.dataset.schema import SEARCH_TEXT_COLUMN, VECTOR_COLUMN, Fingerprint
from tasks.embed.models import DEFAULT_MODEL, get_embedder, query_embedder
from tasks.ingest.discover import discover
from tasks.ingest.load import LoadSettings, load_batch
from tasks.ingest.steps import split_batch
from tasks.search.queries import read_queries
from tasks.text.split import SplitSettings

ROOT = Path(__file__).resolve().parents[1]
COMMIT_CHUNKS = 8_000  # the ingest's default --commit-chunks
SMOKE_ROWS = 2_000
RECALL_SET = ROOT.parent / "shared" / "eval" / "scifact-train"
RECALL_QUERIES = RECALL_SET / "queries.jsonl"
SMOKE_QUESTIONS = (
    "What does it mean that a value is moved in Rust?",
    "How do I insert a value into a hash map?",
    "How do references borrow a value without taking ownership?",
)
COPY_COSINE = 0.85
STEPS = ("fts", "vector", "optimize", "cleanup")


def status_mib(field: str) -> float:
    """A memory figure of /proc/self/status (VmRSS: now, VmHWM: the peak), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"no {field} in /proc/self/status")


def reset_peak() -> None:
    """Start VmHWM (the peak RSS) again from the RSS now (Linux 4.0+), so that the step's
    peak is not the imports' peak."""
    Path("/proc/self/clear_refs").write_text("5")


def note_rows(texts: list[str], first: int, count: int) -> tuple[list[Document], list[Chunk]]:
    """Notes first..first+count as scale.py writes them (a heading, paragraphs taken in turn,
    each marked with the note's number), each split in two chunks at a paragraph."""
    documents, chunks = [], []
    cursor = first * 3  # about three paragraphs a note
    for k in range(first, first + count):
        parts = [f"# Note {k}"]
        while sum(map(len, parts)) < NOTE_CHARS:
            parts.append(f"{texts[cursor % len(texts)]} (note {k})")
            cursor += 1
        half = len(parts) // 2 + 1
        pieces = ["\n\n".join(parts[:half]), "\n\n".join(parts[half:]) or parts[-1]]
        doc_id = f"{k // 1000:03d}/note-{k:06d}.md"
        body = "\n\n".join(parts)
        chunks += document_chunks(doc_id, pieces, [f"Note {k}"] * len(pieces))
        source = SourceFile(
            doc_id, f"/notes/{doc_id}", len(body.encode()), 0, sha256_hex(body), "text/markdown"
        )
        documents.append(Document(source, f"Note {k}"))
    return documents, chunks


def build(uri: str, rows: int, source: Path) -> float:
    """The dataset of `rows` chunks, written as the ingest writes them; returns seconds."""
    start = time.perf_counter()
    texts = paragraphs(source)
    embedder = get_embedder(HASH_MODEL)
    dataset = Dataset(uri)
    dataset.prepare(Fingerprint.of(embedder.info, SplitSettings()))
    notes_per_commit = COMMIT_CHUNKS // 2
    for first in range(0, rows // 2, notes_per_commit):
        documents, chunks = note_rows(texts, first, min(notes_per_commit, rows // 2 - first))
        vectors = embedder.encode([chunk.text for chunk in chunks])
        dataset.write_batch(documents, chunks, vectors)
        release_free_memory()
    return time.perf_counter() - start


def run_step(uri: str, step: str, settings: dict[str, Any]) -> dict[str, Any]:
    """One step on the dataset at `uri`, in this process: RSS before, peak, seconds."""
    dataset = Dataset(uri)
    chunks, documents = dataset.chunks, dataset.documents
    rows = chunks.count_rows()
    if step == "later":  # a later run's writes, before its finalize is measured
        notes = rows // 2 // 100
        documents_, chunks_ = note_rows(paragraphs(SHARED_MD), rows // 2, notes)
        embedder = get_embedder(HASH_MODEL)
        dataset.write_batch(documents_, chunks_, embedder.encode([c.text for c in chunks_]))
        settings = {"notes added": notes}
    release_free_memory()
    reset_peak()
    before = status_mib("VmRSS")
    start = time.perf_counter()
    if step == "fts":
        config = dataclasses.replace(upkeep.FULL_TEXT_INDEX, **settings)
        chunks.create_index(SEARCH_TEXT_COLUMN, config=config)
    elif step == "vector":
        if settings:
            config = dataclasses.replace(ann.VECTOR_INDEX, **settings)
            chunks.create_index(VECTOR_COLUMN, config=config)
        else:
            ann.refresh_vector_index(chunks)
    elif step == "optimize":
        for table in (chunks, documents):
            table.optimize(cleanup_older_than=upkeep.MIN_VERSION_AGE * 60)
    elif step == "cleanup":
        for table in (chunks, documents):
            table.optimize(cleanup_older_than=upkeep.MIN_VERSION_AGE)
    elif step in ("finalize", "later"):
        dataset.finalize(f"run-{step}")
    else:
        raise SystemExit(f"unknown step {step!r}")
    seconds = time.perf_counter() - start
    return {"step": step, "before_mib": round(before, 1), "peak_mib": round(status_mib("VmHWM"), 1),
            "seconds": round(seconds, 2), "settings": settings}  # fmt: skip


def table_row(r: dict[str, Any]) -> str:
    """A step's line of the table: RSS before, peak, added, seconds."""
    shown = json.dumps(r["settings"]) if r["settings"] else "-"
    added = r["peak_mib"] - r["before_mib"]
    return (
        f"{r['step']:<10} {shown:<32} {r['before_mib']:>10.1f} {r['peak_mib']:>9.1f} "
        f"{added:>7.1f} {r['seconds']:>7.2f}"
    )


def in_child(uri: str, step: str, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """`run_step` in a fresh interpreter, so that its peak is the step's alone."""
    command = [sys.executable, "-m", "benchmarks.finalize_memory", "--step", step, "--uri", uri,
               "--settings", json.dumps(settings or {})]  # fmt: skip
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"step {step} failed:\n{result.stdout[-2000:]}{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def copy_of(base: Path, name: str) -> str:
    target = base.parent / name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(base, target)
    return str(target)


def real_vectors(work: Path, smoke: bool) -> tuple[np.ndarray, np.ndarray]:
    """The default model's vectors of the recall set's chunks and of its questions (made once,
    then read from `work`)."""
    cached = work / f"recall-{'smoke' if smoke else 'scifact'}.npz"
    if cached.exists():
        with np.load(cached) as saved:
            return saved["rows"], saved["questions"]
    files = discover(str(SAMPLE_MD if smoke else RECALL_SET / "docs")).files
    texts = []
    for first in range(0, len(files), 500):
        loaded = load_batch(files[first : first + 500], LoadSettings(parse_timeout=0))
        split = split_batch(loaded, SplitSettings(), DEFAULT_MODEL)
        texts += [chunk.text for result in split for chunk in result.chunks]
    questions = list(SMOKE_QUESTIONS) if smoke else [q.query for q in read_queries(RECALL_QUERIES)]
    embedder = get_embedder(DEFAULT_MODEL)
    rows = embedder.encode(texts)[:, : embedder.info.dimension]  # the vector column's part
    asked = query_embedder(embedder.info.model_id).encode(questions)
    np.savez(cached, rows=rows, questions=asked)
    return rows, asked


def with_copies(rows: np.ndarray, count: int, seed: int = 0) -> np.ndarray:
    """`rows` and noisy copies of them (cosine about COPY_COSINE to their original), `count`
    in all."""
    if count <= len(rows):
        return rows
    rng = np.random.default_rng(seed)
    source = rng.integers(0, len(rows), count - len(rows))
    sigma = math.sqrt((1 / COPY_COSINE**2 - 1) / rows.shape[1])  # |noise|² ≈ dimension · σ²
    noise = sigma * rng.standard_normal((len(source), rows.shape[1]), dtype=np.float32)
    copies = rows[source] + noise
    copies /= np.linalg.norm(copies, axis=1, keepdims=True)
    return np.concatenate([rows, copies]).astype(np.float32)


def recall(
    work: Path, vectors: np.ndarray, questions: np.ndarray, settings: dict[str, Any]
) -> dict[str, Any]:
    """recall@10 of a vector index built with `settings` (over the code's own) against exact
    search, and the p50 of a query through it, on a table of `vectors`."""
    folder = work / "recall-table"
    shutil.rmtree(folder, ignore_errors=True)
    data = pa.table(
        {
            "id": pa.array(range(len(vectors)), pa.int64()),
            VECTOR_COLUMN: pa.FixedSizeListArray.from_arrays(
                pa.array(vectors.ravel()), vectors.shape[1]
            ),
        }
    )
    table = lancedb.connect(folder).create_table("recall", data)
    config = dataclasses.replace(ann.VECTOR_INDEX, **settings)
    start = time.perf_counter()
    table.create_index(VECTOR_COLUMN, config=config)
    built = time.perf_counter() - start
    found, seconds = 0, []
    for vector in questions:
        start = time.perf_counter()
        query = ann.tune(table.search(vector).distance_type("cosine")).limit(10)
        approximate = {row["id"] for row in query.to_list()}
        seconds.append(time.perf_counter() - start)
        exact = table.search(vector).distance_type("cosine").bypass_vector_index().limit(10)
        found += len(approximate & {row["id"] for row in exact.to_list()})
    shutil.rmtree(folder, ignore_errors=True)
    return {
        "rows": len(vectors),
        "settings": settings,
        "recall@10": round(found / (10 * len(questions)), 4),
        "query_p50_ms": round(float(np.median(seconds)) * 1000, 2),
        "built_s": round(built, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.finalize_memory")
    parser.add_argument("--rows", type=int, default=200_000, help="chunks in the table")
    parser.add_argument("--work", help="folder that keeps the built dataset between runs")
    parser.add_argument("--vector", action="append", default=[], help="IvfSq fields, JSON")
    parser.add_argument("--fts", action="append", default=[], help="FTS fields, JSON")
    parser.add_argument("--variants-only", action="store_true", help="only --vector, --fts")
    parser.add_argument("--recall", action="store_true", help="recall@10 on real vectors")
    parser.add_argument("--recall-rows", type=int, default=0, help="with noisy copies")
    parser.add_argument("--smoke", action="store_true", help=f"{SMOKE_ROWS} rows, seconds")
    parser.add_argument("--step", help=argparse.SUPPRESS)
    parser.add_argument("--uri", help=argparse.SUPPRESS)
    parser.add_argument("--settings", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    bound_native_memory()  # as the ingest flow does, before the first Lance scan
    if args.step:
        print(json.dumps(run_step(args.uri, args.step, json.loads(args.settings))))
        return 0
    rows = SMOKE_ROWS if args.smoke else args.rows
    work = Path(args.work or tempfile.mkdtemp(prefix="doc-indexer-finalize-"))
    base = work / f"base-{rows}"
    if not base.exists():
        seconds = build(str(base) + ".part", rows, SAMPLE_MD if args.smoke else SHARED_MD)
        Path(str(base) + ".part").rename(base)
        print(f"built {rows} rows in {seconds:.1f} s: {base}")
    else:
        print(f"reusing {rows} rows: {base}")
    print(f"{'step':<10} {'settings':<32} {'before MiB':>10} {'peak MiB':>9} {'added':>7} {'s':>7}")
    runs = [] if args.variants_only else [(step, "steps", {}) for step in STEPS]
    runs += [] if args.variants_only else [("finalize", "whole", {}), ("later", "whole", {})]
    runs += [("vector", "variant", json.loads(raw)) for raw in args.vector]
    runs += [("fts", "variant", json.loads(raw)) for raw in args.fts]
    results, used = [], set()
    for step, copy, settings in runs:  # "steps" and "whole": in turn on one copy each
        uri = str(work / copy) if copy in used and copy != "variant" else copy_of(base, copy)
        used.add(copy)
        r = in_child(uri, step, settings)
        results.append(r)
        print(table_row(r), flush=True)
    report: dict[str, Any] = {"rows": rows, "steps": results}
    if args.recall:
        real, questions = real_vectors(work, args.smoke)
        vectors = with_copies(real, args.recall_rows)
        print(f"recall@10 against exact search: {len(real)} real vectors, {len(vectors)} rows, "
              f"{len(questions)} questions")  # fmt: skip
        report["recall"] = []
        for settings in [{}, *map(json.loads, args.vector)]:
            r = recall(work, vectors, questions, settings)
            report["recall"].append(r)
            shown = json.dumps(settings) if settings else "-"
            print(f"  {shown:<32} recall@10 {r['recall@10']:.4f}  query p50 "
                  f"{r['query_p50_ms']:.1f} ms  built in {r['built_s']:.1f} s")  # fmt: skip
    print(json.dumps(report))
    for name in ("steps", "whole", "variant"):
        shutil.rmtree(work / name, ignore_errors=True)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
