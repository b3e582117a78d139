"""Query latency per mode, in-process and over HTTP, and ANN recall against exact search.

    .venv/bin/python -m benchmarks.query [--sizes 10000 100000] [--queries 50] [--sweep]

Rows are synthetic but shaped like real ones: the 240 XQuAD-en paragraphs of ../shared/eval are
embedded with the bundled model and each is copied many times with Gaussian noise (cosine about
0.85 to its paragraph) and a text that is a random stretch of the paragraph's words, so vector
clusters and full-text term statistics resemble a real corpus. Queries are real XQuAD
questions. Each dataset goes through the ingest flow's own upkeep step (`Dataset.finalize`:
full-text index, vector index above tasks.ann.ANN_MIN_ROWS, compaction).

Reports, per size: p50/p95 of a whole query (embedding included, on one torch thread as in
the service, see tasks.embed.models.prefer_latency) per mode in-process and over HTTP (`--serve` in
a subprocess, one keep-alive connection); vector search alone with the index and as an exact
scan; recall@10 of the index against the exact scan. `--sweep` also times exact scans against
a fresh IVF_SQ index on small tables, which is where ANN_MIN_ROWS comes from.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORK = Path(tempfile.mkdtemp(prefix="doc-indexer-query-bench-"))
os.environ["PREFECT_HOME"] = str(WORK / "prefect")

import httpx  # noqa: E402
import lancedb  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from tasks.dataset.ann import ANN_MIN_ROWS, NPROBES, REFINE_FACTOR, refresh_vector_index  # noqa: E402
from tasks.dataset.dataset import Dataset  # noqa: E402
from tasks.dataset.schema import CHUNKS_TABLE, Fingerprint, chunks_schema  # noqa: E402
from tasks.embed.base import ModelInfo  # noqa: E402
from tasks.embed.models import DEFAULT_MODEL, get_embedder, prefer_latency  # noqa: E402
from tasks.search.params import MODES, SearchParams  # noqa: E402
from tasks.search.queries import read_queries  # noqa: E402
from tasks.search.searcher import Searcher  # noqa: E402
from tasks.text.split import SplitSettings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
XQUAD = ROOT.parent / "shared" / "eval" / "xquad-en"
NOISE = 0.03  # per dimension; 1 / sqrt(1 + 384 * 0.03²) ≈ 0.85 cosine to the paragraph


def percentiles(seconds: list[float]) -> str:
    p50, p95 = np.percentile(np.array(seconds) * 1000, [50, 95])
    return f"p50 {p50:6.1f} ms  p95 {p95:6.1f} ms"


def timed(call, inputs) -> list[float]:
    for item in inputs[:5]:  # warm-up
        call(item)
    out = []
    for item in inputs:
        start = time.perf_counter()
        call(item)
        out.append(time.perf_counter() - start)
    return out


def noisy(base: np.ndarray, rows: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`rows` unit vectors around the base vectors, and which base each came from."""
    source = rng.integers(0, len(base), rows)
    points = base[source] + NOISE * rng.standard_normal((rows, base.shape[1]), dtype=np.float32)
    return points / np.linalg.norm(points, axis=1, keepdims=True), source


def build(uri: str, rows: int, base: np.ndarray, texts: list[str], fp: Fingerprint, rng) -> float:
    """A dataset of `rows` synthetic chunks, finalized like an ingest run; returns seconds."""
    dataset = Dataset(uri)
    dataset.prepare(fp)
    vectors, source = noisy(base, rows, rng)
    words = [text.split() for text in texts]
    stretch = []
    for i in source:
        length = max(5, int(len(words[i]) * 0.7))
        start = rng.integers(0, len(words[i]) - length + 1)
        stretch.append(" ".join(words[i][start : start + length]))
    doc_ids = [f"synthetic/{i // 4:06d}.md" for i in range(rows)]
    columns = {
        "chunk_id": [f"{doc}:chunk:{i % 4:04d}" for i, doc in enumerate(doc_ids)],
        "doc_id": doc_ids,
        "source_path": [f"/corpus/{doc}" for doc in doc_ids],
        "mime_type": ["text/markdown"] * rows,
        "section": [f"Paragraph {i}" for i in source],
        "chunk_index": [i % 4 for i in range(rows)],
        "chunk_count": [4] * rows,
        "text": stretch,
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), base.shape[1]),
    }
    schema = chunks_schema(fp)
    table = pa.table(
        {f.name: columns.get(f.name, pa.nulls(rows, f.type)) for f in schema}, schema=schema
    )
    start = time.perf_counter()
    lancedb.connect(uri).open_table(CHUNKS_TABLE).add(table)
    dataset.finalize("run-bench")
    return time.perf_counter() - start


def recall_at_10(searcher: Searcher, vectors: np.ndarray) -> float:
    found = 0
    for vector in vectors:
        approximate = {hit.chunk_id for hit in searcher._vector(vector, None, 10)}
        exact = searcher.dataset.chunks.search(vector).distance_type("cosine").bypass_vector_index()
        found += len(approximate & {row["chunk_id"] for row in exact.limit(10).to_list()})
    return found / (10 * len(vectors))


def exact_scan(searcher: Searcher, vector: np.ndarray):
    query = searcher.dataset.chunks.search(vector).distance_type("cosine").bypass_vector_index()
    return query.limit(10).to_list()


def serve(uri: str):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "flows.query", "--serve", "--index", uri, "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                return process, base
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("the service did not start")


def sweep(base: np.ndarray, probes: np.ndarray, rng) -> list[dict]:
    """Exact scan against a fresh IVF_SQ index on vector-only tables of growing size."""
    results = []
    for rows in (1000, 2000, 5000, 10_000, 20_000):
        uri = str(WORK / f"sweep-{rows}")
        fp = Fingerprint.of(ModelInfo("sweep", base.shape[1], 256), SplitSettings())
        Dataset(uri).prepare(fp)
        vectors, _ = noisy(base, rows, rng)
        ids = [f"r{i}" for i in range(rows)]
        flat = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), base.shape[1])
        schema = chunks_schema(fp)
        columns = {"chunk_id": ids, "doc_id": ids, "vector": flat}
        data = {f.name: columns.get(f.name, pa.nulls(rows, f.type)) for f in schema}
        table = lancedb.connect(uri).open_table(CHUNKS_TABLE)
        table.add(pa.table(data, schema=schema))
        start = time.perf_counter()
        refresh_vector_index(table, min_rows=0)
        built = time.perf_counter() - start
        searcher = Searcher(Dataset(uri))  # opened after the index exists, so that it is used
        exact = timed(lambda v, s=searcher: exact_scan(s, v), probes)
        ann = timed(lambda v, s=searcher: s._vector(v, None, 10), probes)
        recall = recall_at_10(searcher, probes)
        print(
            f"sweep {rows:>6} rows: exact {percentiles(exact)} | IVF_SQ {percentiles(ann)} "
            f"recall@10 {recall:.3f} (built in {built:.1f} s)"
        )
        results.append(
            {
                "rows": rows,
                "exact_p50_ms": float(np.median(exact) * 1000),
                "ann_p50_ms": float(np.median(ann) * 1000),
                "recall@10": recall,
            }
        )
    return results


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.query")
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--sweep", action="store_true", help="also time small tables")
    parser.add_argument("--no-http", action="store_true", help="skip the HTTP service")
    args = parser.parse_args()
    if not XQUAD.is_dir():
        print(f"skipped: {XQUAD} not found (../shared is not present)")
        return 0
    rng = np.random.default_rng(0)
    embedder = get_embedder(DEFAULT_MODEL)
    texts = [path.read_text("utf-8") for path in sorted((XQUAD / "docs").glob("*.md"))]
    questions = [q.query for q in read_queries(XQUAD / "queries.jsonl")[::7][: args.queries]]
    start = time.perf_counter()
    base = embedder.encode(texts)
    probes = embedder.encode(questions)
    prefer_latency()  # as the service does: one question at a time from here on
    print(
        f"embedded {len(texts)} paragraphs and {len(questions)} questions in "
        f"{time.perf_counter() - start:.1f} s; vector index from {ANN_MIN_ROWS} rows, "
        f"nprobes {NPROBES}, refine factor {REFINE_FACTOR}"
    )
    fp = Fingerprint.of(embedder.info, SplitSettings())
    report: dict = {"sweep": sweep(base, probes, rng) if args.sweep else None, "sizes": {}}

    for rows in args.sizes:
        uri = str(WORK / f"index-{rows}")
        seconds = build(uri, rows, base, texts, fp, rng)
        searcher = Searcher(Dataset(uri))
        indexed = "vector" in searcher.indexed_columns()
        print(
            f"\n{rows} chunks (written and finalized in {seconds:.1f} s; "
            f"vector index: {'yes' if indexed else 'no'})"
        )
        entry = {"vector_index": indexed, "in_process": {}, "http": {}}
        for mode in MODES:
            params = SearchParams(k=10, mode=mode)
            result = timed(lambda q, p=params, s=searcher: s.search(q, p), questions)
            entry["in_process"][mode] = float(np.median(result) * 1000)
            print(f"  in-process {mode:<6} {percentiles(result)}")
        ann = timed(lambda v, s=searcher: s._vector(v, None, 10), probes)
        exact = timed(lambda v, s=searcher: exact_scan(s, v), probes)
        entry["recall@10"] = recall_at_10(searcher, probes)
        print(f"  vector search alone: as queried {percentiles(ann)} | exact {percentiles(exact)}")
        print(f"  recall@10 against exact search: {entry['recall@10']:.3f}")
        if not args.no_http:
            process, base_url = serve(uri)
            try:
                with httpx.Client(base_url=base_url) as client:
                    for mode in MODES:
                        result = timed(
                            lambda q, m=mode: client.post(
                                "/search", json={"text": q, "k": 10, "mode": m}
                            ).raise_for_status(),
                            questions,
                        )
                        entry["http"][mode] = float(np.median(result) * 1000)
                        print(f"  http       {mode:<6} {percentiles(result)}")
            finally:
                process.terminate()
                process.wait()
        report["sizes"][rows] = entry
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
