"""Retrieval metrics at a cut-off: nDCG, recall and MRR over judged queries.

A run maps each query id to document ids, best first (a document ranks by its best chunk).
Qrels map each query id to {document id: graded relevance}; relevance 0 means judged not
relevant. The definitions follow trec_eval / pytrec_eval, which MTEB reports: gain is the
relevance grade, discount 1 / log2(rank + 1), and every judged query counts (a query with no
hits scores 0).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

Run = dict[str, list[str]]
Qrels = dict[str, dict[str, int]]


def read_qrels(path: str | Path) -> Qrels:
    """Judgements from a TSV with a header `qid  file  relevance`."""
    qrels: Qrels = {}
    with open(path, encoding="utf-8", newline="") as handle:
        for number, row in enumerate(csv.DictReader(handle, delimiter="\t"), start=2):
            try:
                qrels.setdefault(row["qid"], {})[row["file"]] = int(row["relevance"])
            except (KeyError, TypeError, ValueError):
                raise ValueError(
                    f"{path} line {number}: expected tab-separated qid, file, relevance"
                ) from None
    return qrels


def ndcg(ranked: list[str], judged: dict[str, int], k: int) -> float:
    dcg = sum(judged.get(doc, 0) / math.log2(rank + 1) for rank, doc in enumerate(ranked[:k], 1))
    ideal = sorted((grade for grade in judged.values() if grade > 0), reverse=True)[:k]
    idcg = sum(grade / math.log2(rank + 1) for rank, grade in enumerate(ideal, 1))
    return dcg / idcg if idcg else 0.0


def recall(ranked: list[str], judged: dict[str, int], k: int) -> float:
    relevant = {doc for doc, grade in judged.items() if grade > 0}
    return len(relevant.intersection(ranked[:k])) / len(relevant) if relevant else 0.0


def reciprocal_rank(ranked: list[str], judged: dict[str, int], k: int) -> float:
    return next((1.0 / rank for rank, doc in enumerate(ranked[:k], 1) if judged.get(doc, 0)), 0.0)


def score_run(run: Run, qrels: Qrels, k: int = 10) -> dict[str, float]:
    """Mean nDCG@k, recall@k and MRR@k over the queries that have a relevant document."""
    judged = {qid: grades for qid, grades in qrels.items() if any(g > 0 for g in grades.values())}
    metrics = {"ndcg": ndcg, "recall": recall, "mrr": reciprocal_rank}
    return {
        f"{name}@{k}": round(
            sum(metric(run.get(qid, []), grades, k) for qid, grades in judged.items())
            / max(len(judged), 1),
            5,
        )
        for name, metric in metrics.items()
    }
