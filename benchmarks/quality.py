"""Retrieval quality on every dev set, in every mode, in one table; and fusion tuning.

    .venv/bin/python -m benchmarks.quality [--sets SET ...] (default: all five below)
                                           [--modes vector fts hybrid] [--model SPEC]
                                           [--splitter recursive|semantic
                                            [--breakpoint-percentile P]] [--tune] [--smoke]

The sets: xquad-en, xquad-zh, xquad-en2zh and xquad-zh2en (English and Chinese questions
over English and Chinese paragraphs, the last two across languages), scifact-train, and the
page-finding sets of docs-questions/ over the shared documentation folders (rust-book-en,
rust-book-zh2en, debian-handbook-zh, debian-handbook-en2zh; the share whose page is among the
first 3 beside the other figures), and this repository's Korean set over the Korean Debian FAQ
with its English twin (ko-docs, ko-docs-en2ko; benchmarks/data/ko-docs/README.md). Each
set's documents are ingested once into
.cache/bench/quality/<set or folder>-<model> (reused while the dataset's fingerprint fits) and
searched in batch in each mode (or the `--modes` given), documents ranked by their best
chunk, as `flows.evaluate` does. Prints nDCG@10 per set and mode, recall@10 and MRR@10
beside it, and one JSON line.

`--splitter semantic` builds the sets with the semantic splitter instead, in folders of
their own (<set>-<model>-semantic-p<P>), so the recursive splitter's datasets stay and the
two can be compared side by side; `--modes` measures only some modes.

`--tune` also takes each query's vector and full-text candidate lists once and scores
hybrid mode over a grid of its fusion settings (tasks/search/fusion.py: the vector list's
weight α and the candidate depth), printing the best setting for the Chinese set and for
the others, the current setting's figures, and those with a reciprocal-rank term added to
its scores. Tune on these dev sets only.

`--headings` measures what the embedder should see: vector search over the same chunks
embedded as they are and with their heading path in front (exact cosine search in numpy,
documents ranked by their best chunk).

`--smoke` measures cut copies of xquad-en and xquad-zh (SMOKE_SETS: their first SMOKE_DOCS
documents and the questions judged on them, in a temporary folder, datasets too) in seconds;
it still needs ../shared.
"""

from __future__ import annotations

import argparse
import itertools
import json
import pickle
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from flows.ingest import ingest
from tasks.dataset.dataset import Dataset
from tasks.dataset.location import DatasetError
from tasks.embed.models import DEFAULT_MODEL
from tasks.eval.metrics import read_qrels, score_run
from tasks.search.fusion import Fusion, best_per_doc, term_coverage
from tasks.search.hits import Hit
from tasks.search.params import MODES, Mode, SearchParams
from tasks.search.queries import read_queries
from tasks.search.searcher import Searcher
from tasks.text.analysis import query_text
from tasks.text.split import SplitSettings

ROOT = Path(__file__).resolve().parents[1]
EVAL = ROOT.parent / "shared" / "eval"
CACHE = ROOT / ".cache" / "bench" / "quality"  # the sets' datasets
SETS = ("xquad-en", "xquad-zh", "xquad-en2zh", "xquad-zh2en", "scifact-train")
# Page finding: natural questions over the shared documentation folders (docs-questions/).
DOCS_QUESTIONS = {
    "rust-book-en": "md/rust-book",
    "rust-book-zh2en": "md/rust-book",
    "debian-handbook-zh": "html/debian-handbook-zh-cn",
    "debian-handbook-en2zh": "html/debian-handbook-zh-cn",
}
# Sets kept in this repository (benchmarks/data/<folder>/: docs/, <set>.jsonl, <set>.qrels.tsv):
# Korean questions over the Korean Debian FAQ, and their English twins.
LOCAL_SETS = {"ko-docs": "ko-docs", "ko-docs-en2ko": "ko-docs"}
LOCAL = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True)
class DevSet:
    """Where a dev set's documents, questions and judgements are."""

    docs: Path
    queries: Path
    qrels: Path

    @classmethod
    def named(cls, name: str) -> DevSet:
        if name in LOCAL_SETS:
            folder = LOCAL / LOCAL_SETS[name]
            return cls(folder / "docs", folder / f"{name}.jsonl", folder / f"{name}.qrels.tsv")
        if name in DOCS_QUESTIONS:
            questions = EVAL / "docs-questions"
            corpus = ROOT.parent / "shared" / "corpus" / DOCS_QUESTIONS[name]
            return cls(corpus, questions / f"{name}.jsonl", questions / f"{name}.qrels.tsv")
        return cls(EVAL / name / "docs", EVAL / name / "queries.jsonl", EVAL / name / "qrels.tsv")


K = 10
DEPTH = 100  # candidates per list kept for tuning


def dataset_for(name: str, model: str, split: SplitSettings | None = None) -> str:
    """The dev set's dataset, ingested now unless an earlier run's still fits; with the
    semantic splitter in a folder named after it and its percentile."""
    split = split or SplitSettings()
    docs = DevSet.named(name).docs
    folder = f"{name if docs.name == 'docs' else docs.name}-{model.replace(':', '-')}"
    if split.splitter != "recursive":
        folder += f"-{split.splitter}-p{split.breakpoint_percentile:g}"
    uri = CACHE / folder
    options = {"splitter": split.splitter, "breakpoint_percentile": split.breakpoint_percentile}
    source = str(docs)
    try:
        ingest(source_dir=source, index_uri=str(uri), model=model, **options)
    except DatasetError:  # built by other code or settings: build it again
        shutil.rmtree(uri)
        ingest(source_dir=source, index_uri=str(uri), model=model, **options)
    return str(uri)


def scores(
    searcher: Searcher, name: str, modes: tuple[Mode, ...] = MODES
) -> dict[str, dict[str, float]]:
    dev = DevSet.named(name)
    queries, qrels = read_queries(dev.queries), read_qrels(dev.qrels)
    texts = [q.query for q in queries]
    results = {}
    for mode in modes:
        hits = searcher.search_many(texts, SearchParams(k=K, mode=mode, per_doc=True))
        run = {q.qid: [h.doc_id for h in found] for q, found in zip(queries, hits, strict=True)}
        results[mode] = {**score_run(run, qrels, K), "top3": score_run(run, qrels, 3)["recall@3"]}
    return results


def candidates(searcher: Searcher, name: str) -> list[tuple[str, str, list[Hit], list[Hit], float]]:
    """(qid, question, vector list, full-text list, the full-text list's term coverage) per
    query, DEPTH chunks each; kept beside the dataset, so that tuning again costs no search
    (removed with the dataset; one file per set, as two sets may share a dataset)."""
    version = searcher.dataset.chunks.version
    cache = Path(searcher.dataset.uri) / f"candidates-v4-{name}-{version}.pkl"
    if cache.exists():
        return pickle.loads(cache.read_bytes())
    queries = read_queries(DevSet.named(name).queries)
    vectors = searcher.embedder().encode([q.query for q in queries])
    found = []
    for q, vector in zip(queries, vectors, strict=True):
        by_vector, by_text = searcher.lists(q.query, vector, DEPTH)
        coverage = term_coverage(query_text(q.query).split(), by_text.terms)
        found.append((q.qid, q.query, by_vector, by_text.hits, coverage))
    cache.write_bytes(pickle.dumps(found))
    return found


def tune(lists: dict[str, list], qrels: dict[str, dict], now: Fusion) -> None:
    """nDCG@10 of hybrid mode over a grid of fusion settings (the vector weight α, the same
    for every script here, the coverage gate and the candidate depth), per set; then the best
    setting for the sets of Chinese questions and for the others."""
    table: dict[tuple[float, float | None, int], dict[str, float]] = {}
    grid = itertools.product((0.2, 0.3, 0.4, 0.5, 0.6, 0.7), (None, 0.34, 0.5), (30, 50, 100))
    for alpha, gate, depth in grid:
        setting = Fusion(alpha, alpha, depth, full_coverage=gate)
        table[(alpha, gate, depth)] = {
            name: hybrid_ndcg(setting, per_query, qrels[name]) for name, per_query in lists.items()
        }
        print(f"α={alpha} gate={gate} depth={depth}: {table[(alpha, gate, depth)]}", flush=True)
    cjk = [name for name in lists if name.endswith(("-zh", "-zh2en"))]
    for group in (cjk, [name for name in lists if name not in cjk]):
        if group:
            best = max(table, key=lambda key: sum(table[key][name] for name in group))
            print(f"best for {', '.join(group)}: α, gate, depth = {best}: {table[best]}")
    scores_now = {
        name: hybrid_ndcg(now, per_query, qrels[name]) for name, per_query in lists.items()
    }
    print(f"now ({now}): " + json.dumps(scores_now))
    for weight in (0.5, 1.0, 2.0):  # ranks as well as scores: a reciprocal-rank term added
        figures = {
            name: hybrid_ndcg(now, per_query, qrels[name], weight)
            for name, per_query in lists.items()
        }
        print(f"now + {weight} × Σ 60/(60 + rank): " + json.dumps(figures))


def hybrid_ndcg(setting: Fusion, per_query: list, qrels: dict, rank_weight: float = 0.0) -> float:
    """nDCG@10 of documents ranked by their best chunk in the fused lists; with
    `rank_weight`, each chunk's fused score gains rank_weight × Σ 60 / (60 + its rank) over
    the two lists (reciprocal-rank fusion's term, on a scale like the z-scores')."""
    run = {}
    for qid, text, by_vector, by_text, coverage in per_query:
        depth = setting.depth
        fused = setting.fuse(text, by_vector[:depth], by_text[:depth], 2 * depth, coverage)
        if rank_weight:
            bonus = reciprocal_ranks(by_vector[:depth], by_text[:depth])
            fused = sorted(fused, key=lambda hit: -(hit.score + rank_weight * bonus(hit)))
        run[qid] = [hit.doc_id for hit in best_per_doc(fused)][:K]
    return score_run(run, qrels, K)["ndcg@10"]


def reciprocal_ranks(*lists: list[Hit]) -> Callable[[Hit], float]:
    """A chunk's Σ 60 / (60 + its rank) over `lists` (0-based ranks; absent: nothing)."""
    ranks = [{hit.chunk_id: rank for rank, hit in enumerate(hits)} for hits in lists]
    return lambda hit: sum(
        60 / (60 + found[hit.chunk_id]) for found in ranks if hit.chunk_id in found
    )


def headings_experiment(uri: str, name: str, model: str) -> dict[str, float]:
    """Vector nDCG@10 with chunks embedded as stored, and with the heading path in front."""
    import numpy as np

    from tasks.embed.models import get_embedder

    rows = Dataset(uri).chunks.to_arrow().select(["doc_id", "section", "text"]).to_pylist()
    queries, qrels = (
        read_queries(EVAL / name / "queries.jsonl"),
        read_qrels(EVAL / name / "qrels.tsv"),
    )
    embedder = get_embedder(model)
    questions = embedder.encode([q.query for q in queries])
    inputs = {
        "text": [row["text"] for row in rows],
        "headings + text": [f"{row['section']}\n\n{row['text']}".strip() for row in rows],
    }
    results = {}
    for label, texts in inputs.items():
        similarity = questions @ embedder.encode(texts).T
        run = {}
        for q, scores_of_query in zip(queries, similarity, strict=True):
            ranked = [rows[i]["doc_id"] for i in np.argsort(-scores_of_query)[: K * 10]]
            run[q.qid] = list(dict.fromkeys(ranked))[:K]
        results[label] = score_run(run, qrels, K)["ndcg@10"]
    return results


SMOKE_SETS = ("xquad-en", "xquad-zh")
SMOKE_DOCS = 4  # about 20 questions a set: every mode and the tuning grid run, in seconds


def smoke_sets(target: Path) -> Path:
    """SMOKE_SETS cut to their first SMOKE_DOCS documents and the questions judged on them,
    laid out as ../shared/eval is."""
    for name in SMOKE_SETS:
        dev = DevSet.named(name)
        kept = sorted(path.name for path in dev.docs.iterdir())[:SMOKE_DOCS]
        (target / name / "docs").mkdir(parents=True)
        for file in kept:
            shutil.copyfile(dev.docs / file, target / name / "docs" / file)
        qrels = read_qrels(dev.qrels)
        judged = {qid for qid, docs in qrels.items() if set(docs) <= set(kept)}
        lines = dev.queries.read_text("utf-8").splitlines()
        queries = [line for line in lines if line.strip() and json.loads(line)["qid"] in judged]
        (target / name / "queries.jsonl").write_text("\n".join(queries) + "\n", "utf-8")
        rows = [
            f"{qid}\t{doc}\t{grade}" for qid in sorted(judged) for doc, grade in qrels[qid].items()
        ]
        (target / name / "qrels.tsv").write_text("qid\tfile\trelevance\n" + "\n".join(rows) + "\n")
    return target


def chosen_sets(names: list[str], smoke: bool) -> list[str] | None:
    """The sets to measure: `names`, or with `smoke` SMOKE_SETS cut into a temporary folder
    (EVAL and CACHE then point there); None, having said which, where a set is missing."""
    global EVAL, CACHE
    names = list(SMOKE_SETS) if smoke else names
    missing = [name for name in names if not DevSet.named(name).queries.is_file()]
    if missing:
        print(f"skipped: {', '.join(missing)} not found under {EVAL} (../shared is not present)")
        return None
    if smoke:
        work = Path(tempfile.mkdtemp(prefix="doc-indexer-quality-smoke-"))
        EVAL, CACHE = smoke_sets(work / "eval"), work / "datasets"
    return names


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.quality")
    parser.add_argument("--sets", nargs="+", default=[*SETS, *DOCS_QUESTIONS, *LOCAL_SETS])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument(
        "--splitter",
        default="recursive",
        choices=("recursive", "semantic"),
        help="build the sets with this splitter (semantic: in folders of their own)",
    )
    parser.add_argument(
        "--breakpoint-percentile",
        type=float,
        default=SplitSettings().breakpoint_percentile,
        metavar="P",
        help="the semantic splitter's breakpoint percentile",
    )
    parser.add_argument("--tune", action="store_true", help="also tune the hybrid fusion")
    parser.add_argument(
        "--headings", action="store_true", help="also embed with the heading path in front"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"the first {SMOKE_DOCS} documents of {' and '.join(SMOKE_SETS)}, in seconds",
    )
    args = parser.parse_args()
    sets = chosen_sets(args.sets, args.smoke)
    if sets is None:
        return 0
    split = SplitSettings(splitter=args.splitter, breakpoint_percentile=args.breakpoint_percentile)
    modes = tuple(mode for mode in MODES if mode in args.modes)
    report, lists, qrels, headings = {}, {}, {}, {}
    fusion = None
    for name in sets:
        uri = dataset_for(name, args.model, split)
        searcher = Searcher(Dataset(uri))
        fusion = searcher.fusion()
        report[name] = scores(searcher, name, modes)
        if args.headings:
            headings[name] = headings_experiment(uri, name, args.model)
        if args.tune:
            lists[name] = candidates(searcher, name)
            qrels[name] = read_qrels(DevSet.named(name).qrels)
    splitter = args.splitter + (
        f" (breakpoint percentile {args.breakpoint_percentile:g})"
        if args.splitter == "semantic"
        else ""
    )
    print(
        f"nDCG@10 (recall@10, MRR@10; the share of questions whose document is in the first 3), "
        f"model {args.model}, splitter {splitter}, documents ranked by their best chunk"
    )
    print(f"{'set':<20}" + "".join(f"{mode:>33}" for mode in modes))
    for name, modes in report.items():
        cells = "".join(
            f"{m['ndcg@10']:>9.3f} ({m['recall@10']:.3f}, {m['mrr@10']:.3f}; {m['top3']:.2f})"
            for m in modes.values()
        )
        print(f"{name:<20}{cells}")
    print(json.dumps(report))
    for name, figures in headings.items():
        print(f"{name}: vector nDCG@10 by what is embedded: {figures}")
    if args.tune and fusion is not None:
        tune(lists, qrels, fusion)
    return 0


if __name__ == "__main__":
    sys.exit(main())
