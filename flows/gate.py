"""The ingest gate: score a run's version on the user's questions against the previous one.

`python -m flows.ingest DIR --gate QUERIES.jsonl QRELS.tsv [--max-drop 0.01]`: after a run
that changed the dataset, hybrid nDCG@10 (documents ranked by their best chunk, as
`flows.evaluate` scores them) is computed on the new version and on the version the previous
run left (read through its run tag); the ingest flow restores that version when the score
fell by more than the allowed drop, and ends Failed with both scores.
"""

from __future__ import annotations

from dataclasses import dataclass

from tasks.dataset.dataset import Dataset
from tasks.eval.metrics import Qrels, read_qrels, score_run
from tasks.ingest.settings import GateSettings
from tasks.ingest.summary import GateOutcome
from tasks.search.params import SearchParams
from tasks.search.queries import read_queries
from tasks.search.searcher import Searcher

GATE_K = 10


@dataclass(frozen=True)
class GateQuestions:
    """The --gate files, read once when the run starts (a bad file fails before any write)."""

    texts: dict[str, str]  # qid → question
    judgements: Qrels

    @classmethod
    def read(cls, gate: GateSettings) -> GateQuestions:
        assert gate.gate is not None
        queries, qrels = gate.gate
        return cls({q.qid: q.query for q in read_queries(queries)}, read_qrels(qrels))


def ndcg(dataset: Dataset, questions: GateQuestions) -> float:
    """nDCG@10 of the dataset's default mode on the questions and their judgements."""
    qids = list(questions.texts)
    params = SearchParams(k=GATE_K, per_doc=True)
    found = Searcher(dataset).search_many([questions.texts[q] for q in qids], params)
    run = {qid: [hit.doc_id for hit in hits] for qid, hits in zip(qids, found, strict=True)}
    return score_run(run, questions.judgements, GATE_K)["ndcg@10"]


def check_gate(
    dataset: Dataset, questions: GateQuestions, previous_tag: str | None, max_drop: float
) -> GateOutcome:
    """The scores after the run and at `previous_tag` (None: a new dataset, nothing to
    compare); the caller restores the previous version when the outcome failed."""
    after = ndcg(dataset, questions)
    before = ndcg(dataset.at(previous_tag), questions) if previous_tag else None
    return GateOutcome(after, before, previous_tag, max_drop)
