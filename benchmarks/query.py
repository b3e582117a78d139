"""Query latency per mode, in-process and over HTTP, and ANN recall against exact search.

    .venv/bin/python -m benchmarks.query [--sizes 10000 100000] [--queries 50] [--sweep]
                                         [--no-http] [--queries-file PATH] [--profile]
                                         [--smoke]

Rows are synthetic but written as an ingest writes them. The passages are the XQuAD-en and
XQuAD-zh paragraphs of ../shared/eval (240 English, 240 Chinese), loaded and split by the
ingest's own steps and embedded with the default model (tasks.embed.models.DEFAULT_MODEL:
the real one, not the `hash:` test embedder; only the passages are embedded, so 100,000 rows
take no longer to embed than 10,000). Each row is a passage's vector with Gaussian noise
(cosine about 0.85 to it) and a random stretch of 70% of its text (words in English,
characters in Chinese), so that vector clusters and full-text term statistics resemble a
real corpus in both languages. Rows go into the dataset through the ingest's write
(`Dataset.prepare`, `Dataset.write_batch`: the chunk rows with their analysed `search_text`,
the documents ledger) and its upkeep step (`Dataset.finalize`: the full-text index, the
vector index above tasks.dataset.ann.ANN_MIN_ROWS, compaction). Queries are real XQuAD
questions, English and Chinese in turn.

Reports, per size: p50/p95 of a whole query (embedding included, on one torch thread as in
the service, see tasks.embed.models.prefer_latency) per mode in-process and over HTTP (`--serve` in
a subprocess, one keep-alive connection), in-process both as the service searches (the vectors
kept in memory, tasks/search/kept_chunks.py) and as a single question does (LanceDB's vector
search); the throughput of a batch in the default mode
(`Searcher.search_many` on one warm Searcher, as `flows.query --queries-file` runs): the
questions of `--queries-file` (one a line, or JSON Lines with a "query" or a "text"), else
the benchmark's; vector search alone with the index and as an exact scan; recall@10 of the
index against the exact scan. `--profile` also prints where the in-process hybrid queries
spend their time: each step timed alone (question embedding, each list, both lists in one
round trip, the cross-script re-scoring) beside the whole query, then cProfile's calls of
the searching thread, the most cumulative time first (the lists run on the query loop's
thread: there they show as waits). `--sweep` also times exact scans
against a fresh IVF_SQ index on small tables, which is where ANN_MIN_ROWS comes from.

`--smoke` runs the same steps in seconds without ../shared: the passages are two Rust book
chapters and two Chinese Debian handbook pages of data/sample (SMOKE_FILES), the questions
SMOKE_QUESTIONS, one size of SMOKE_ROWS rows (and a sweep of SMOKE_SWEEP_ROWS with --sweep).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import os
import pstats
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORK = Path(tempfile.mkdtemp(prefix="doc-indexer-query-bench-"))
os.environ["PREFECT_HOME"] = str(WORK / "prefect")

import httpx  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.support.rows import document_chunks  # noqa: E402
from tasks.core.records import Chunk, Document, SourceFile, sha256_hex  # noqa: E402
from tasks.dataset.ann import ANN_MIN_ROWS, NPROBES, REFINE_FACTOR, refresh_vector_index  # noqa: E402
from tasks.dataset.dataset import Dataset  # noqa: E402
from tasks.dataset.schema import Fingerprint  # noqa: E402
from tasks.embed.base import CrossScriptRescorer, ModelInfo  # noqa: E402
from tasks.embed.models import DEFAULT_MODEL, get_embedder, prefer_latency, query_embedder  # noqa: E402
from tasks.ingest.discover import discover  # noqa: E402
from tasks.ingest.load import LoadSettings, load_batch  # noqa: E402
from tasks.ingest.steps import split_batch  # noqa: E402
from tasks.search.params import MODES, SearchParams  # noqa: E402
from tasks.search.queries import read_queries  # noqa: E402
from tasks.search.ranking import start_text_list, start_vector_list  # noqa: E402
from tasks.search.searcher import Searcher  # noqa: E402
from tasks.text.split import SplitSettings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EVAL = ROOT.parent / "shared" / "eval"
XQUAD = (EVAL / "xquad-en", EVAL / "xquad-zh")
SAMPLE = ROOT / "data" / "sample"
SMOKE_FILES = (  # under data/sample: what SMOKE_QUESTIONS ask about
    "rust-book/ch04-01-what-is-ownership.md",
    "rust-book/ch08-03-hash-maps.md",
    "debian-handbook-zh-cn/sect.apt-file.html",
    "debian-handbook-zh-cn/sect.asynchronous-task-scheduling-anacron.html",
)
SMOKE_QUESTIONS = (
    "What does it mean that a value is moved in Rust?",
    "如何查找一个文件属于哪个软件包？",
    "How do I insert a value into a hash map?",
    "anacron 如何运行错过的计划任务？",
)
SMOKE_ROWS = 400
SMOKE_SWEEP_ROWS: tuple[int, ...] = (200, 400)
SWEEP_ROWS: tuple[int, ...] = (1000, 2000, 5000, 10_000, 20_000)
COSINE = 0.85  # of a row's vector to its passage's
STRETCH = 0.7  # share of a passage's words (or Chinese characters) in a row's text
CHUNKS_PER_DOC = 4
WRITE_ROWS = 10_000  # chunks per write_batch call (an ingest batch of 2,500 documents)


def percentiles(seconds: list[float]) -> str:
    p50, p95 = np.percentile(np.array(seconds) * 1000, [50, 95])
    return f"p50 {p50:6.1f} ms  p95 {p95:6.1f} ms"


def read_questions(path: str) -> list[str]:
    """The questions of a file: one a line, or JSON Lines with a "query" (batch files) or a
    "text" (POST /search bodies); blank lines skipped."""
    questions = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            text = line.strip()
            if text.startswith("{"):
                record = json.loads(text)
                text = record.get("query") or record.get("text") or ""
            if text.strip():
                questions.append(text)
    if not questions:
        raise SystemExit(f"{path}: no questions")
    return questions


def batch_rate(searcher: Searcher, questions: list[str]) -> float:
    """Questions per second through one warm Searcher in the default mode, as one batch."""
    params = SearchParams(k=10)
    searcher.search_many(questions[:5], params)  # warm-up
    start = time.perf_counter()
    searcher.search_many(questions, params)
    return len(questions) / (time.perf_counter() - start)


def profile(searcher: Searcher, questions: list[str], lines: int = 25) -> str:
    """cProfile of the questions in hybrid mode: the calls with the most cumulative time."""
    params = SearchParams(k=10, mode="hybrid")
    profiler = cProfile.Profile()
    profiler.enable()
    for question in questions:
        searcher.search(question, params)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(lines)
    return out.getvalue()


def steps(searcher: Searcher, questions: list[str]) -> str:
    """p50/p95 of each step of a warm hybrid query, each timed alone on the warm searcher
    (the lists as the searcher runs them, on its query loop), and of the whole query."""
    reading = searcher._reading(None)
    embedder = reading.embedder
    vectors = {q: embedder.encode([q])[0] for q in questions}
    depth = reading.fusion.depth

    def vector_list(q: str) -> list:
        return start_vector_list(reading, vectors[q], depth).result()

    def text_list(q: str) -> object:
        return start_text_list(reading, reading.question(q, "hybrid"), depth, floor=False).result()

    def both(q: str) -> list:
        text = start_text_list(reading, reading.question(q, "hybrid"), depth, floor=False)
        return [vector_list(q), text.result()]

    def rescoring(q: str) -> float:
        assert isinstance(embedder, CrossScriptRescorer)
        head = vector_list(q)[: embedder.rescore_depth]  # not timed
        start = time.perf_counter()
        embedder.cross_script_bonus(q, [hit.text for hit in head])
        return time.perf_counter() - start

    params = SearchParams(k=10, mode="hybrid")
    rows = [
        ("question embedding", timed(lambda q: embedder.encode([q]), questions)),
        (f"vector list ({depth} hits)", timed(vector_list, questions)),
        (f"full-text list ({depth} hits)", timed(text_list, questions)),
        ("both lists, side by side", timed(both, questions)),
    ]
    if isinstance(embedder, CrossScriptRescorer):
        rows.append(("cross-script re-scoring", [rescoring(q) for q in questions]))
    rows.append(("whole hybrid query", timed(lambda q: searcher.search(q, params), questions)))
    return "\n".join(f"  step {name:<28} {percentiles(seconds)}" for name, seconds in rows)


def timed(call, inputs) -> list[float]:
    for item in inputs[:5]:  # warm-up
        call(item)
    out = []
    for item in inputs:
        start = time.perf_counter()
        call(item)
        out.append(time.perf_counter() - start)
    return out


def passages(files: list[SourceFile]) -> list[str]:
    """The chunk texts of the files, loaded and split as an ingest does."""
    documents = load_batch(files, LoadSettings(parse_timeout=0))  # parsed in this process
    results = split_batch(documents, SplitSettings(), DEFAULT_MODEL)
    return [chunk.text for result in results for chunk in result.chunks]


def questions_of(count: int) -> list[str]:
    """`count` XQuAD questions, English and Chinese in turn (every 7th of each set)."""
    sets = [[q.query for q in read_queries(d / "queries.jsonl")][::7] for d in XQUAD]
    return [q for pair in zip(*sets, strict=False) for q in pair][:count]


def noisy(
    base: np.ndarray, rows: int, rng: np.random.Generator, dimension: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """`rows` unit vectors around the base vectors (cosine about COSINE), and which base each
    came from. Where the model gives a second, routed vector after the first `dimension`
    components (tasks/embed/cjk_backend.py), each part gets its own noise and stays a unit
    vector, and an empty routed part stays empty."""
    source = rng.integers(0, len(base), rows)
    dimension = dimension or base.shape[1]
    parts = [base[source, :dimension], base[source, dimension:]]
    made = []
    for part in parts:
        if not part.shape[1]:
            continue
        sigma = math.sqrt((1 / COSINE**2 - 1) / part.shape[1])  # |noise|² ≈ width · sigma²
        empty = ~part.any(axis=1)
        points = part + sigma * rng.standard_normal(part.shape, dtype=np.float32)
        points /= np.linalg.norm(points, axis=1, keepdims=True)
        points[empty] = 0.0
        made.append(points)
    return np.hstack(made), source


def stretch(text: str, rng: np.random.Generator) -> str:
    """A random run of STRETCH of the text's words, or of its characters where it has no
    spaces to speak of (Chinese)."""
    words = text.split()
    spaced = len(words) * 20 > len(text)  # English words are far shorter than 20 characters
    units: list[str] = words if spaced else list(text)
    length = max(5, int(len(units) * STRETCH))
    start = int(rng.integers(0, max(1, len(units) - length + 1)))
    return (" " if spaced else "").join(units[start : start + length])


def synthetic_rows(
    texts: list[str], source: np.ndarray, rng: np.random.Generator
) -> tuple[list[Document], list[Chunk]]:
    """Documents of CHUNKS_PER_DOC chunks each, chunk i a stretch of passage `source[i]`."""
    documents: list[Document] = []
    chunks: list[Chunk] = []
    for first in range(0, len(source), CHUNKS_PER_DOC):
        doc_id = f"synthetic/{first // CHUNKS_PER_DOC:06d}.md"
        parts = [stretch(texts[i], rng) for i in source[first : first + CHUNKS_PER_DOC]]
        sections = [f"Passage {i}" for i in source[first : first + len(parts)]]
        chunks += document_chunks(doc_id, parts, sections)
        body = "\n\n".join(parts)
        source_file = SourceFile(
            doc_id, f"/corpus/{doc_id}", len(body.encode()), 0, sha256_hex(body), "text/markdown"
        )
        documents.append(Document(source_file, source_file.title))
    return documents, chunks


def write(
    uri: str, fp: Fingerprint, documents: list[Document], chunks: list[Chunk], vectors: np.ndarray
) -> Dataset:
    """The rows into a new dataset as an ingest run writes them, batch by batch (no upkeep)."""
    dataset = Dataset(uri)
    dataset.prepare(fp)
    per_doc = {doc.doc_id: doc for doc in documents}
    for first in range(0, len(chunks), WRITE_ROWS):
        part = chunks[first : first + WRITE_ROWS]
        batch = [per_doc[doc_id] for doc_id in dict.fromkeys(chunk.doc_id for chunk in part)]
        dataset.write_batch(batch, part, vectors[first : first + WRITE_ROWS])
    return dataset


def build(
    uri: str,
    rows: int,
    base: np.ndarray,
    texts: list[str],
    fp: Fingerprint,
    rng: np.random.Generator,
) -> float:
    """A dataset of `rows` synthetic chunks, written and finalized like an ingest run; returns
    seconds."""
    vectors, source = noisy(base, rows, rng, fp.dimension)
    documents, chunks = synthetic_rows(texts, source, rng)
    start = time.perf_counter()
    write(uri, fp, documents, chunks, vectors).finalize("run-bench")
    return time.perf_counter() - start


def recall_at_10(searcher: Searcher, vectors: np.ndarray) -> float:
    found = 0
    for vector in vectors:
        approximate = {hit.chunk_id for hit in searcher.nearest(vector, None, 10)}
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
    # No rate limit: the benchmark asks as fast as the service answers.
    command = ["--serve", "--index", uri, "--port", str(port), "--rate-limit", "off"]
    process = subprocess.Popen(
        [sys.executable, "-m", "flows.query", *command],
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


def sweep(
    sizes: tuple[int, ...],
    base: np.ndarray,
    texts: list[str],
    probes: np.ndarray,
    rng: np.random.Generator,
) -> list[dict]:
    """Exact scan against a fresh IVF_SQ index on tables of growing size."""
    results = []
    for rows in sizes:
        uri = str(WORK / f"sweep-{rows}")
        fp = Fingerprint.of(ModelInfo("sweep", base.shape[1], 256), SplitSettings())
        vectors, source = noisy(base, rows, rng)
        table = write(uri, fp, *synthetic_rows(texts, source, rng), vectors).chunks
        start = time.perf_counter()
        refresh_vector_index(table, min_rows=0)
        built = time.perf_counter() - start
        searcher = Searcher(Dataset(uri))  # opened after the index exists, so that it is used
        exact = timed(lambda v, s=searcher: exact_scan(s, v), probes)
        ann = timed(lambda v, s=searcher: s.nearest(v, None, 10), probes)
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
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.query",
        description=__doc__,  # what the rows are, the vectors' model included
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--sweep", action="store_true", help="also time small tables")
    parser.add_argument("--no-http", action="store_true", help="skip the HTTP service")
    parser.add_argument(
        "--queries-file",
        metavar="PATH",
        help="the batch's questions: one a line, or JSON Lines with a query or text",
    )
    parser.add_argument(
        "--profile", action="store_true", help="also profile the in-process hybrid queries"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"{len(SMOKE_FILES)} files of data/sample, {SMOKE_ROWS} rows, in seconds",
    )
    args = parser.parse_args()
    if args.smoke:
        files = [s for s in discover(str(SAMPLE)).files if s.doc_id in SMOKE_FILES]
        questions = list(SMOKE_QUESTIONS)
        sizes, sweep_sizes = [SMOKE_ROWS], SMOKE_SWEEP_ROWS
    elif all(d.is_dir() for d in XQUAD):
        files = [source for d in XQUAD for source in discover(str(d / "docs")).files]
        questions, sizes, sweep_sizes = questions_of(args.queries), args.sizes, SWEEP_ROWS
    else:
        print(f"skipped: {' or '.join(map(str, XQUAD))} not found (../shared is not present)")
        return 0
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    texts = passages(files)
    embedder = get_embedder(DEFAULT_MODEL)
    base = embedder.encode(texts)
    probes = query_embedder(embedder.info.model_id).encode(questions)
    prefer_latency()  # as the service does: one question at a time from here on
    print(
        f"loaded, split and embedded {len(texts)} passages and {len(questions)} questions in "
        f"{time.perf_counter() - start:.1f} s; vector index from {ANN_MIN_ROWS} rows, "
        f"nprobes {NPROBES}, refine factor {REFINE_FACTOR}"
    )
    fp = Fingerprint.of(embedder.info, SplitSettings())
    report: dict = {
        "sweep": sweep(sweep_sizes, base[:, : fp.dimension], texts, probes, rng)
        if args.sweep
        else None,
        "sizes": {},
    }

    for rows in sizes:
        uri = str(WORK / f"index-{rows}")
        seconds = build(uri, rows, base, texts, fp, rng)
        # As the service and batches search (the vectors kept in memory), and as a single
        # question does (LanceDB's vector search).
        searcher = Searcher(Dataset(uri), keep_vectors=True)
        start = time.perf_counter()
        kept = searcher.kept_chunks()
        kept_s = time.perf_counter() - start
        lancedb_searcher = Searcher(Dataset(uri))
        indexed = "vector" in searcher.indexed_columns()
        print(
            f"\n{rows} chunks (written and finalized in {seconds:.1f} s; "
            f"vector index: {'yes' if indexed else 'no'}; vectors kept in memory: "
            f"{'yes' if kept is not None and kept.kept else 'no'}, "
            f"read in {kept_s:.2f} s)"
        )
        entry = {"vector_index": indexed, "in_process": {}, "in_process_lancedb": {}, "http": {}}
        for key, label, warm in (
            ("in_process", "in-process", searcher),
            ("in_process_lancedb", "in-process, LanceDB vector lists", lancedb_searcher),
        ):
            for mode in MODES if key == "in_process" else ("vector", "hybrid"):
                params = SearchParams(k=10, mode=mode)
                result = timed(lambda q, p=params, s=warm: s.search(q, p), questions)
                entry[key][mode] = float(np.median(result) * 1000)
                print(f"  {label} {mode:<6} {percentiles(result)}")
        batch = read_questions(args.queries_file) if args.queries_file else questions
        entry["batch_questions_per_s"] = batch_rate(searcher, batch)
        print(
            f"  batch      {len(batch)} questions, default mode: "
            f"{entry['batch_questions_per_s']:.1f} questions/s"
        )
        if args.profile:
            print(steps(searcher, questions))
            print(profile(searcher, questions))
        ann = timed(lambda v, s=searcher: s.nearest(v, None, 10), probes)
        exact = timed(lambda v, s=searcher: exact_scan(s, v), probes)
        entry["recall@10"] = recall_at_10(searcher, probes)
        print(
            f"  vector search alone: LanceDB as queried {percentiles(ann)} | LanceDB exact "
            f"{percentiles(exact)}"
        )
        if kept is not None and kept.kept:
            in_memory = timed(lambda v, k=kept: k.nearest(v, 10), probes)
            print(f"  vector search alone: kept in memory {percentiles(in_memory)}")
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
    try:
        sys.exit(main())
    finally:
        shutil.rmtree(WORK, ignore_errors=True)  # its datasets: hundreds of MiB at 100k
