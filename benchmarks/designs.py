"""Model and fusion designs compared on every dev set, by exact cosine over the same chunks.

    .venv/bin/python -m benchmarks.designs [--sets SET ...] [--designs NAME ...] [--smoke]

`--smoke`: every design on the cut copies of xquad-en and xquad-zh that
`benchmarks.quality --smoke` measures (seconds; still needs ../shared).

Each set's chunks are those of its dataset built with the dual model (DUAL_MODEL, the default
before headings) by `benchmarks.quality` (made first where missing), and its full-text lists
those that `benchmarks.quality --tune` keeps (`candidates`). A design says how chunks and
questions become vectors; the vector list is the exact cosine top 100 (re-scored across
scripts where the design's question encoder does that, as the searcher does), fused with the
same full-text list by the fusion the design names. Printed per set and design: vector, full-text
and hybrid nDCG@10, and the share of questions whose document is first and in the first 3.

Designs (`DESIGNS`):
- dual: the stored vectors of the dual model (English MiniLM on Latin text, USE multilingual
  on all), its questions and fusion: the figures `benchmarks.quality --model DUAL_MODEL`
  prints;
- e5: multilingual-e5-small alone (tasks/embed/e5_backend.py), its "query:"/"passage:"
  prefixes;
- dual-e5: the dual layout with e5 as the multilingual part instead of USE;
- headings: the dual model, each chunk embedded with its document title and heading path in
  front ("Title > A > B", then the text); questions as the dual's; headings-path: the heading
  path alone in front (the default model, DEFAULT_MODEL);
- cjk-e5: chunks routed by script: a Chinese, Japanese or Korean chunk scored by
  multilingual-e5-small (its heading path in front), any other by the default model
  (headings-path); the question embedded by both, each model's cosines standardised over its
  own chunks before one list is made (`cjk_e5_lists`);
- runs-T: the dual's, with the English model also reading the Latin runs (identifiers,
  commands, English words) of chunks in another script, at weight T (see `latin_runs`).

e5's passage vectors of a set are kept beside its dataset (e5-passages-<version>.npy), so a
second run costs only the questions.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks import quality
from benchmarks.quality import (
    DOCS_QUESTIONS,
    LOCAL_SETS,
    SECTION_SETS,
    SETS,
    Candidates,
    DevSet,
    candidates,
    dataset_for,
    judge_sections,
    section_needs,
)
from tasks.core.scripts import language_group
from tasks.dataset.dataset import Dataset
from tasks.embed.base import CrossScriptRescorer
from tasks.embed.dual_backend import DualEmbedder, DualQuestions, reads_english
from tasks.embed.e5_backend import E5_MODEL_ID
from tasks.embed.models import DUAL_MODEL, get_embedder, query_embedder
from tasks.eval.metrics import read_qrels, score_run
from tasks.search.fusion import Fusion, best_per_doc, fusion_for, standardised
from tasks.search.hits import HIT_COLUMNS, Hit
from tasks.search.searcher import Searcher

K, DEPTH = 10, 100

# A run of Latin-script words inside text of another script: identifiers, commands, paths,
# option names, English words (letters, digits and the punctuation identifiers hold).
_LATIN_WORD = r"[A-Za-z\u00c0-\u024f][A-Za-z0-9\u00c0-\u024f_.\-/:+@=]*"
_LATIN_RUN = re.compile(rf"{_LATIN_WORD}(?:[ \t]+[A-Za-z0-9\u00c0-\u024f_.\-/:+@=]+)*")
LATIN_RUN_LETTERS = 4  # fewer Latin letters than this in a chunk: no runs worth reading


def latin_runs(text: str) -> str:
    """The Latin-script runs of `text`, one per line ("" when they hold fewer than
    LATIN_RUN_LETTERS letters): what the English part can read of a chunk in another script."""
    runs = _LATIN_RUN.findall(text)
    letters = sum(ch.isalpha() for run in runs for ch in run)
    return "\n".join(runs) if letters >= LATIN_RUN_LETTERS else ""


@dataclass
class SetData:
    name: str
    uri: str
    rows: list[dict]
    stored: np.ndarray  # the default model's vectors, row order
    lists: list[Candidates]  # each question's lists before fusion
    qrels: dict


@dataclass(frozen=True)
class Design:
    chunks: Callable[[SetData], np.ndarray]
    questions: Callable[[SetData], tuple[np.ndarray, CrossScriptRescorer | None]]
    fusion: Fusion
    # the vector lists themselves, where the design ranks otherwise than one cosine
    lists: Callable[[SetData], list[list[Hit]]] | None = None


def load(name: str) -> SetData:
    uri = dataset_for(name, DUAL_MODEL)
    searcher = Searcher(Dataset(uri))
    table = Dataset(uri).chunks.to_arrow()
    rows = table.select([c for c in HIT_COLUMNS if c in table.column_names]).to_pylist()
    stored = np.stack(table.column("vector").to_numpy(zero_copy_only=False)).astype(np.float32)
    judged = section_needs(name) if name in SECTION_SETS else read_qrels(DevSet.named(name).qrels)
    return SetData(name, uri, rows, stored, candidates(searcher, name), judged)


def _dual() -> DualEmbedder:
    dual = get_embedder(DUAL_MODEL)
    assert isinstance(dual, DualEmbedder)
    return dual


def e5_passages(data: SetData) -> np.ndarray:
    version = Dataset(data.uri).chunks.version
    cache = Path(data.uri) / f"e5-passages-{version}.npy"
    if cache.exists():
        return np.load(cache)
    vectors = get_embedder("e5").encode([row["text"] for row in data.rows])
    np.save(cache, vectors)
    return vectors


def _questions(data: SetData) -> list[str]:
    return [found.question.text for found in data.lists]


def dual_questions(data: SetData) -> tuple[np.ndarray, CrossScriptRescorer | None]:
    asker = query_embedder(Dataset(data.uri).fingerprint.model)
    assert isinstance(asker, DualQuestions)
    return asker.encode(_questions(data)), asker


def e5_questions(data: SetData) -> tuple[np.ndarray, CrossScriptRescorer | None]:
    return query_embedder(E5_MODEL_ID).encode(_questions(data)), None


def _dual_e5() -> tuple[DualEmbedder, DualQuestions]:
    documents = DualEmbedder(_dual().english, get_embedder("e5"))
    return documents, DualQuestions(documents, query_embedder(E5_MODEL_ID))


def dual_e5_chunks(data: SetData) -> np.ndarray:
    documents, _ = _dual_e5()
    texts = [row["text"] for row in data.rows]
    reads = np.array([reads_english(text) for text in texts], bool)
    english = data.stored[reads, :384] * math.sqrt(2.0)  # the stored English part, unweighted
    half = 1 / math.sqrt(2.0)
    return documents.weighted(
        texts, (half, half, 0.0), (half, half), e5_passages(data), english, reads
    )


def dual_e5_questions(data: SetData) -> tuple[np.ndarray, CrossScriptRescorer | None]:
    _, asker = _dual_e5()
    return asker.encode(_questions(data)), asker


def latin_share(text: str) -> float:
    runs = latin_runs(text)
    letters = sum(ch.isalpha() for ch in text)
    return sum(ch.isalpha() for ch in runs) / letters if letters else 0.0


def runs_chunks(weight: float, full_share: float | None = None) -> Callable[[SetData], np.ndarray]:
    """The dual's vectors; a chunk in another script whose Latin runs have words gets the English
    model's vector of those runs at `weight` in the English part, its multilingual part as
    before, the slot taking the rest (so a question in another script scores it as before)."""

    def chunks(data: SetData) -> np.ndarray:
        vectors = data.stored.copy()
        english = _dual().english
        rows = [i for i, row in enumerate(data.rows) if not reads_english(row["text"])]
        runs = {i: latin_runs(data.rows[i]["text"]) for i in rows}
        rows = [i for i in rows if runs[i]]
        if rows:
            encoded = english.encode([runs[i] for i in rows])
            weights = np.full(len(rows), weight, np.float32)
            if full_share is not None:  # in proportion to the Latin share, up to full_share
                shares = np.array([latin_share(data.rows[i]["text"]) for i in rows], np.float32)
                weights *= np.minimum(1.0, shares / full_share)
            vectors[rows, :384] = encoded * weights[:, None]
            vectors[rows, -1] = np.sqrt(np.maximum(0.0, 0.5 - weights * weights))
        return vectors

    return chunks


def stored(data: SetData) -> np.ndarray:
    return data.stored


def with_headings(row: dict, title: bool = True) -> str:
    """The chunk's text after its document title (where `title`) and heading path
    ("Title > A > B")."""
    parts = [row["title"]] if title else []
    path = [part for part in [*parts, *row["section"].split(" > ")] if part and part.strip()]
    heading = " > ".join(dict.fromkeys(path))
    return f"{heading}\n\n{row['text']}" if heading else row["text"]


def headings_chunks(title: bool) -> Callable[[SetData], np.ndarray]:
    """The dual model's vectors of each chunk with its heading path (and the document
    title, where `title`) in front, kept beside the dataset like e5's."""

    def chunks(data: SetData) -> np.ndarray:
        version = Dataset(data.uri).chunks.version
        cache = Path(data.uri) / f"headings{'' if title else '-path'}-{version}.npy"
        if cache.exists():
            return np.load(cache)
        vectors = _dual().encode([with_headings(row, title) for row in data.rows])
        np.save(cache, vectors)
        return vectors

    return chunks


def cjk_e5_lists(data: SetData) -> list[list[Hit]]:
    """Each chunk scored by the model it is routed to: a Chinese, Japanese or Korean chunk by
    e5 (its heading path in front, as the default model reads chunks), any other by the
    default model (headings-path, re-scored across scripts as the searcher does); each
    model's cosines standardised over its own chunks, so that one model's scale does not
    rank its chunks above the other's."""
    groups = [language_group(row["text"]) for row in data.rows]
    routed = np.array([group in CJK_GROUPS for group in groups], bool)
    version = Dataset(data.uri).chunks.version
    cache = Path(data.uri) / f"e5-headings-{version}.npy"
    if cache.exists():
        passages = np.load(cache)
    else:
        texts = [with_headings(row, title=False) for i, row in enumerate(data.rows) if routed[i]]
        passages = get_embedder("e5").encode(texts) if texts else np.zeros((0, 384), np.float32)
        np.save(cache, passages)
    e5_questions_, _ = e5_questions(data)
    default = vector_lists(data, DESIGNS["headings-path"])
    rows = np.flatnonzero(routed)
    found = []
    for hits, asked in zip(default, e5_questions_, strict=True):
        others = [hit for hit in hits if not routed[_row_of(data, hit.chunk_id)]]
        scored = standardised(others)
        merged = [hit.rescored(scored[hit.chunk_id]) for hit in others]
        if rows.size:
            cosines = passages @ asked
            z = (cosines - cosines.mean()) / (cosines.std() or 1.0)
            for at in np.argsort(-z)[:DEPTH]:
                merged.append(Hit.from_row(data.rows[rows[at]], float(z[at])))
        found.append(sorted(merged, key=lambda hit: -hit.score)[:DEPTH])
    return found


CJK_GROUPS = frozenset({"chinese", "japanese", "korean"})


def _row_of(data: SetData, chunk_id: str) -> int:
    if not hasattr(data, "_rows_by_id"):
        data._rows_by_id = {row["chunk_id"]: i for i, row in enumerate(data.rows)}  # type: ignore[attr-defined]
    return data._rows_by_id[chunk_id]  # type: ignore[attr-defined]


DESIGNS: dict[str, Design] = {
    "dual": Design(stored, dual_questions, fusion_for(True)),
    "e5": Design(e5_passages, e5_questions, fusion_for(True)),
    "dual-e5": Design(dual_e5_chunks, dual_e5_questions, fusion_for(True)),
    "headings": Design(headings_chunks(True), dual_questions, fusion_for(True)),
    "headings-path": Design(headings_chunks(False), dual_questions, fusion_for(True)),
    "cjk-e5": Design(stored, dual_questions, fusion_for(True), cjk_e5_lists),
    **{
        f"runs-{t}": Design(runs_chunks(t), dual_questions, fusion_for(True))
        for t in (0.05, 0.1, 0.2, 0.3)
    },
    **{
        f"runs-{t}-share{share}": Design(runs_chunks(t, share), dual_questions, fusion_for(True))
        for t in (0.3, 0.5, 0.7)
        for share in (0.3, 0.6)
    },
}


def vector_lists(data: SetData, design: Design) -> list[list[Hit]]:
    if design.lists is not None:
        return design.lists(data)
    chunks = design.chunks(data)
    asked, rescorer = design.questions(data)
    found = []
    for asking, vector in zip(data.lists, asked, strict=True):
        question = asking.question.text
        similarity = chunks @ vector
        order = np.argsort(-similarity)[:DEPTH]
        hits = [Hit.from_row(data.rows[i], float(similarity[i])) for i in order]
        if rescorer is not None:
            head = hits[: rescorer.rescore_depth]
            bonus = rescorer.cross_script_bonus(question, [hit.text for hit in head])
            head = [hit.rescored(hit.score + float(b)) for hit, b in zip(head, bonus, strict=True)]
            hits = sorted(head + hits[len(head) :], key=lambda hit: -hit.score)
        found.append(hits)
    return found


def measure(data: SetData, by_vector: list[list[Hit]], fusion: Fusion) -> dict[str, dict]:
    """Each mode's figures on one set: nDCG@10 and the first 1 and 3 for a page set,
    section@3, page@3 and page@1 for a section set."""
    lists = mode_lists(data, by_vector, fusion)
    if data.name in SECTION_SETS:
        return {
            mode: judge_sections(data.name, data.qrels, [hits[:K] for hits in per_query])
            for mode, per_query in lists.items()
        }
    return {
        mode: summary(
            {
                found.qid: [hit.doc_id for hit in best_per_doc(hits)][:K]
                for found, hits in zip(data.lists, per_query, strict=True)
            },
            data.qrels,
        )
        for mode, per_query in lists.items()
    }


def mode_lists(
    data: SetData, by_vector: list[list[Hit]], fusion: Fusion
) -> dict[str, list[list[Hit]]]:
    """Each question's hits in each mode: the design's vector list, the full-text list, and
    the two fused with the translated list as the searcher fuses them."""
    lists: dict[str, list[list[Hit]]] = {"vector": [], "fts": [], "hybrid": []}
    depth = fusion.depth
    for found, vectors in zip(data.lists, by_vector, strict=True):
        fused = fusion.fuse(
            found.question,
            vectors[:depth],
            found.text[:depth],
            2 * depth,
            found.coverage,
            found.translated[:depth],
        )
        for mode, hits in (("vector", vectors), ("fts", found.text), ("hybrid", fused)):
            lists[mode].append(hits)
    return lists


def summary(run: dict[str, list[str]], qrels: dict) -> dict[str, float]:
    return {
        "ndcg": score_run(run, qrels, K)["ndcg@10"],
        "top1": score_run(run, qrels, 1)["recall@1"],
        "top3": score_run(run, qrels, 3)["recall@3"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.designs")
    parser.add_argument(
        "--sets", nargs="+", default=[*SETS, *DOCS_QUESTIONS, *LOCAL_SETS, *SECTION_SETS]
    )
    parser.add_argument("--designs", nargs="+", default=list(DESIGNS), choices=DESIGNS)
    parser.add_argument("--smoke", action="store_true", help="cut xquad-en and xquad-zh")
    args = parser.parse_args()
    sets = quality.chosen_sets(args.sets, args.smoke)
    if sets is None:
        return 0
    print("set / design: nDCG@10 (top 1, top 3) for vector, fts, hybrid", flush=True)
    width = max(map(len, args.designs)) + 2
    for name in sets:
        data = load(name)
        for label in args.designs:
            design = DESIGNS[label]
            figures = measure(data, vector_lists(data, design), design.fusion)
            if name in SECTION_SETS:
                cells = "  ".join(
                    f"{mode} section@3 {m['section@3']} (page@3 {m['page@3']}, "
                    f"page@1 {m['page@1']})"
                    for mode, m in figures.items()
                )
            else:
                cells = "  ".join(
                    f"{mode} {m['ndcg']:.3f} ({m['top1']:.2f}, {m['top3']:.2f})"
                    for mode, m in figures.items()
                )
            print(f"{name:<24}{label:<{width}}{cells}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
