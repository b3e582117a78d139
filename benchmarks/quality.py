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
with its English twin (ko-docs, ko-docs-en2ko; benchmarks/data/ko-docs/README.md), and the
section-finding sets over the Debian New Maintainers' Guide in English, Chinese and Japanese
(SECTION_SETS: maint-guide-<questions' language>2<pages' language>, the same 30 needs asked in
each language; a hit is right when it is on the answering page and its section path holds the
answering heading, as ../shared/eval/score_sections.py judges: section@3, page@3 and page@1
of the first 10 chunks, no per-document grouping). Each set's documents are ingested once into
.cache/bench/quality/<set or folder>-<model> (reused while the dataset's fingerprint fits) and
searched in batch in each mode (or the `--modes` given), documents ranked by their best
chunk, as `flows.evaluate` does. Prints nDCG@10 per set and mode, recall@10 and MRR@10
beside it, and one JSON line.

`--splitter semantic` builds the sets with the semantic splitter instead, in folders of
their own (<set>-<model>-semantic-p<P>), so the recursive splitter's datasets stay and the
two can be compared side by side; `--modes` measures only some modes.

`--tune` also takes each query's vector, full-text and translated candidate lists once and
scores hybrid mode over a grid of its fusion settings (tasks/search/fusion.py: the vector
list's weight α, the coverage gate, the translated list's weight γ and the candidate depth),
printing each set's figure per setting (nDCG@10; section@3 for the section sets), the
settings that never fall below a set's better list, and the current setting's figures. Tune
on these dev sets only.

`--headings` measures what the embedder should see: vector search over the same chunks
embedded as they are and with their heading path in front (exact cosine search in numpy,
documents ranked by their best chunk).

`--smoke` measures cut copies of xquad-en and xquad-zh (SMOKE_SETS: their first SMOKE_DOCS
documents and the questions judged on them, in a temporary folder, datasets too) in seconds;
it still needs ../shared.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import itertools
import json
import pickle
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from flows.ingest import ingest
from tasks.dataset.dataset import Dataset
from tasks.dataset.location import DatasetError
from tasks.embed.models import DEFAULT_MODEL
from tasks.eval.metrics import read_qrels, score_run
from tasks.search.fusion import Fusion, best_per_doc, standardised, term_coverage
from tasks.search.hits import Hit
from tasks.search.params import MODES, Mode, SearchParams
from tasks.search.queries import read_queries
from tasks.search.question import Question
from tasks.search.searcher import Searcher
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
# Section finding (docs-questions/maint-guide-*.jsonl): set → (the questions' language, the
# pages' folder under corpus/html); the pages' language names the heading to find.
MAINT_GUIDE = {"en": "maint-guide-en", "zh": "maint-guide-zh-cn", "ja": "maint-guide-ja"}
SECTION_PAIRS = (("en", "en"), ("zh", "zh"), ("ja", "ja"), ("en", "zh"), ("zh", "en"))
SECTION_PAIRS += (("en", "ja"), ("ja", "en"))
SECTION_SETS = {
    (f"maint-guide-{asked}" if asked == pages else f"maint-guide-{asked}2{pages}"): (asked, pages)
    for asked, pages in SECTION_PAIRS
}


@dataclass(frozen=True)
class DevSet:
    """Where a dev set's documents, questions and judgements are."""

    docs: Path
    queries: Path
    qrels: Path

    @classmethod
    def named(cls, name: str) -> DevSet:
        if name in SECTION_SETS:
            asked, pages = SECTION_SETS[name]
            questions = EVAL / "docs-questions" / f"maint-guide-{asked}.jsonl"
            corpus = ROOT.parent / "shared" / "corpus" / "html" / MAINT_GUIDE[pages]
            return cls(corpus, questions, questions)  # the questions name their sections
        if name in LOCAL_SETS:
            folder = LOCAL / LOCAL_SETS[name]
            return cls(folder / "docs", folder / f"{name}.jsonl", folder / f"{name}.qrels.tsv")
        if name in DOCS_QUESTIONS:
            questions = EVAL / "docs-questions"
            corpus = ROOT.parent / "shared" / "corpus" / DOCS_QUESTIONS[name]
            return cls(corpus, questions / f"{name}.jsonl", questions / f"{name}.qrels.tsv")
        return cls(EVAL / name / "docs", EVAL / name / "queries.jsonl", EVAL / name / "qrels.tsv")


K = 10
# Candidates per list kept for tuning: the fusion's depth, as a search takes them (a routed
# model's vector list holds that many of each kind of chunk: tasks/search/ranking.py).
DEPTH = 50


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
    if name in SECTION_SETS:
        return section_scores(searcher, name, modes)
    dev = DevSet.named(name)
    queries, qrels = read_queries(dev.queries), read_qrels(dev.qrels)
    texts = [q.query for q in queries]
    results = {}
    for mode in modes:
        hits = searcher.search_many(texts, SearchParams(k=K, mode=mode, per_doc=True))
        run = {q.qid: [h.doc_id for h in found] for q, found in zip(queries, hits, strict=True)}
        results[mode] = {**score_run(run, qrels, K), "top3": score_run(run, qrels, 3)["recall@3"]}
    return results


def section_scores(
    searcher: Searcher, name: str, modes: tuple[Mode, ...]
) -> dict[str, dict[str, float]]:
    """section@3, page@3 and page@1 (counts of the set's questions) of each mode, from the
    first 10 chunks of each question (`flows.query --queries-file … -k 10`)."""
    needs = section_needs(name)
    results = {}
    for mode in modes:
        found = searcher.search_many(
            [need["query"] for need in needs], SearchParams(k=K, mode=mode)
        )
        results[mode] = judge_sections(name, needs, found)
    return results


def section_needs(name: str) -> list[dict[str, str]]:
    """A section set's questions: {"qid", "query", "section_<language>" …} per line."""
    lines = DevSet.named(name).queries.read_text("utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def judge_sections(name: str, needs: list[dict], found: list[list[Hit]]) -> dict[str, float]:
    """section@3, page@3, page@1 as ../shared/eval/score_sections.py counts them (its own
    functions: a hit's page stem, the heading normalised)."""
    judge = section_judge()
    pages = SECTION_SETS[name][1]
    counts = {"section@3": 0, "page@3": 0, "page@1": 0}
    for need, hits in zip(needs, found, strict=True):
        rows = [{"doc_id": hit.doc_id, "section": hit.section} for hit in hits]
        heading = judge.norm(need[f"section_{pages}"])
        stems = [judge.stem(row) for row in rows]
        counts["section@3"] += any(
            stem == need["qid"] and heading in judge.norm(row["section"])
            for stem, row in zip(stems[:3], rows[:3], strict=True)
        )
        counts["page@3"] += need["qid"] in stems[:3]
        counts["page@1"] += bool(stems) and stems[0] == need["qid"]
    return counts


@cache
def section_judge() -> Any:
    """../shared/eval/score_sections.py, imported from its file."""
    spec = importlib.util.spec_from_file_location("score_sections", EVAL / "score_sections.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Candidates:
    """One question's lists before fusion (DEPTH chunks each) and the full-text list's term
    coverage."""

    qid: str
    question: Question
    vector: list[Hit]
    text: list[Hit]
    translated: list[Hit]
    coverage: float


def candidates(searcher: Searcher, name: str) -> list[Candidates]:
    """Each question's candidate lists; kept beside the dataset, so that tuning again costs no
    search (removed with the dataset; one file per set, as two sets may share a dataset)."""
    version = searcher.dataset.chunks.version
    cache = Path(searcher.dataset.uri) / f"candidates-v6-{name}-{version}.pkl"
    if cache.exists():  # kept as tuples: a class pickled by `python -m` is __main__'s
        return [Candidates(*fields) for fields in pickle.loads(cache.read_bytes())]
    if name in SECTION_SETS:
        queries = [(need["qid"], need["query"]) for need in section_needs(name)]
    else:
        queries = [(q.qid, q.query) for q in read_queries(DevSet.named(name).queries)]
    vectors = searcher.embedder().encode([text for _, text in queries])
    found = []
    for (qid, text), vector in zip(queries, vectors, strict=True):
        lists = searcher.lists(text, vector, DEPTH)
        coverage = term_coverage(list(lists.question.terms), lists.text.terms)
        found.append(
            Candidates(
                qid, lists.question, lists.vector, lists.text.hits, lists.translated, coverage
            )
        )
    fields = [field.name for field in dataclasses.fields(Candidates)]
    cache.write_bytes(pickle.dumps([tuple(getattr(c, f) for f in fields) for c in found]))
    return found


# α (other scripts), α (CJK), gate, γ, α (a question in a language the dataset does not hold)
Setting = tuple[float, float, float | None, float, float | None]


@dataclass(frozen=True)
class Standardised:
    """One question's lists at the fusion's depth, as the fusion reads them: each candidate's
    z-score in each list (the list's lowest where it is missing)."""

    cjk: bool
    across: bool  # in a language the dataset does not hold, and not translated into it
    coverage: float
    filled: tuple[bool, bool, bool]  # which lists have hits: vector, text, translated
    scores: Any  # 3 × candidates
    found: Any  # 3 × candidates: which list found each
    hits: list[Hit]


def standardise(c: Candidates, depth: int) -> Standardised:
    lists = [c.vector, c.text[:depth], c.translated[:depth]]  # the vector list as searched
    found = [standardised(hits) for hits in lists]
    hits = list({hit.chunk_id: hit for hits in reversed(lists) for hit in hits}.values())
    scores = np.array(
        [[z.get(hit.chunk_id, min(z.values(), default=0.0)) for hit in hits] for z in found]
    )
    members = np.array([[hit.chunk_id in z for hit in hits] for z in found], bool)
    filled = (bool(lists[0]), bool(lists[1]), bool(lists[2]))
    question = c.question
    untranslated = question.across and not question.translations
    return Standardised(question.cjk, untranslated, c.coverage, filled, scores, members, hits)


def tune(lists: dict[str, list[Candidates]], judged: dict[str, Any], now: Fusion) -> None:
    """Hybrid mode's figure per set (nDCG@10; section@3 for the section sets) over a grid of
    fusion settings, from each question's z-scores computed once; then the settings that keep
    every set at or above each of its lists alone, best first by the sum of the sets' shares,
    and the current setting."""
    ready = {
        name: [standardise(c, now.depth) for c in per_query] for name, per_query in lists.items()
    }
    lone = {
        name: tuple(
            figure(name, per_query, [getattr(c, kind)[: 2 * K] for c in per_query], judged[name])
            for kind in ("vector", "text", "translated")
        )
        for name, per_query in lists.items()
    }
    print("each list alone (vector, text, translated): " + json.dumps(lone))
    table: dict[Setting, dict[str, float]] = {}
    grid = itertools.product(
        (0.5, 0.6, 0.7),
        (0.4, 0.5, 0.6),
        (None, 0.5),
        (0.0, 0.25, 0.35, 0.5),
        (None, 0.6, 0.8, 1.0),
    )
    for alpha, cjk_alpha, gate, gamma, across in grid:
        setting = Fusion(alpha, cjk_alpha, now.depth, gate, 0.1 if gate else 0.0, gamma, across)
        key = (alpha, cjk_alpha, gate, gamma, across)
        table[key] = {
            name: fused_figure(name, lists[name], ready[name], judged[name], weights_of(setting))
            for name in lists
        }
    keeps = [
        key
        for key, figures in table.items()
        if all(figures[name] >= max(lone[name]) - 1e-9 for name in figures)
    ]
    ranked = sorted(keeps or table, key=lambda key: -sum(shares(table[key], lists).values()))
    for key in ranked[:5]:
        label = "never below a list" if keeps else "best (none is never below a list)"
        print(f"{label}: α, α(CJK), gate, γ, α(across) = {key}: {json.dumps(table[key])}")
    figures_now = {
        name: fused_figure(name, lists[name], ready[name], judged[name], weights_of(now))
        for name in lists
    }
    print(f"now ({now}): " + json.dumps(figures_now))


def weights_of(setting: Fusion) -> Callable[[Standardised], Any]:
    """The weights a fusion setting gives one question's three lists (Fusion.fuse)."""

    def weights(ready: Standardised) -> Any:
        alpha = setting.cjk_vector_weight if ready.cjk else setting.vector_weight
        if ready.across and setting.across_vector_weight is not None:
            alpha = setting.across_vector_weight
        beta = 1 - alpha
        if setting.full_coverage is not None:
            if ready.coverage < setting.min_coverage:
                beta = 0.0
            else:
                beta *= min(1.0, ready.coverage / setting.full_coverage)
        return np.array([alpha, beta, setting.translated_weight])

    return weights


def shares(figures: dict[str, float], lists: dict[str, list]) -> dict[str, float]:
    """Each set's figure on one scale: counts of a section set as shares of its questions."""
    return {
        name: value / len(lists[name]) if name in SECTION_SETS else value
        for name, value in figures.items()
    }


def fused_figure(
    name: str,
    per_query: list[Candidates],
    ready: list[Standardised],
    judged: Any,
    weights: Callable[[Standardised], Any],
) -> float:
    """Hybrid mode's figure on one set with the weights a setting gives each question (a list
    that weighs nothing adds no hits beside one with hits that weighs something; candidates
    in the fusion's order of ties: translated, text, vector)."""
    found = []
    for question in ready:
        weight = weights(question)
        fused = weight @ question.scores
        live = [i for i in range(3) if question.filled[i] and weight[i]]
        keep = question.found[live].any(axis=0) if live else np.ones(len(question.hits), bool)
        order = [i for i in np.argsort(-fused, kind="stable") if keep[i]][: 2 * K]
        found.append([question.hits[i] for i in order])
    return figure(name, per_query, found, judged)


def figure(name: str, per_query: list[Candidates], found: list[list[Hit]], judged: Any) -> float:
    """nDCG@10 of documents ranked by their best chunk; section@3 for a section set."""
    if name in SECTION_SETS:
        return judge_sections(name, judged, found)["section@3"]
    run = {
        c.qid: [hit.doc_id for hit in best_per_doc(hits)][:K]
        for c, hits in zip(per_query, found, strict=True)
    }
    return score_run(run, judged, K)["ndcg@10"]


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
    parser.add_argument(
        "--sets", nargs="+", default=[*SETS, *DOCS_QUESTIONS, *LOCAL_SETS, *SECTION_SETS]
    )
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
            qrels[name] = (
                section_needs(name)
                if name in SECTION_SETS
                else read_qrels(DevSet.named(name).qrels)
            )
    splitter = args.splitter + (
        f" (breakpoint percentile {args.breakpoint_percentile:g})"
        if args.splitter == "semantic"
        else ""
    )
    print(
        f"nDCG@10 (recall@10, MRR@10; the share of questions whose document is in the first 3), "
        f"model {args.model}, splitter {splitter}, documents ranked by their best chunk"
    )
    print(f"{'set':<22}" + "".join(f"{mode:>33}" for mode in modes))
    for name, by_mode in report.items():
        if name in SECTION_SETS:
            continue
        cells = "".join(
            f"{m['ndcg@10']:>9.3f} ({m['recall@10']:.3f}, {m['mrr@10']:.3f}; {m['top3']:.2f})"
            for m in by_mode.values()
        )
        print(f"{name:<22}{cells}")
    sections = {name: by_mode for name, by_mode in report.items() if name in SECTION_SETS}
    if sections:
        print("\nSection finding (maint-guide, 30 needs): section@3 (page@3, page@1)")
        print(f"{'set':<22}" + "".join(f"{mode:>33}" for mode in modes))
        for name, by_mode in sections.items():
            cells = "".join(
                f"{m['section@3']:>23} ({m['page@3']:>2}, {m['page@1']:>2})"
                for m in by_mode.values()
            )
            print(f"{name:<22}{cells}")
    print(json.dumps(report))
    for name, figures in headings.items():
        print(f"{name}: vector nDCG@10 by what is embedded: {figures}")
    if args.tune and fusion is not None:
        tune(lists, qrels, fusion)
    return 0


if __name__ == "__main__":
    sys.exit(main())
