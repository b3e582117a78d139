"""Retrieval metrics and the evaluation flow on a tiny synthetic benchmark."""

from __future__ import annotations

import json
import math

import pytest

from flows.evaluate import main
from tasks.dataset.dataset import Dataset
from tasks.eval.metrics import ndcg, read_qrels, recall, reciprocal_rank, score_run


def test_metrics_match_hand_computed_values():
    judged = {"a": 2, "b": 1, "z": 0}
    ranked = ["x", "b", "a"]
    dcg = 1 / math.log2(3) + 2 / math.log2(4)
    assert ndcg(ranked, judged, 10) == pytest.approx(dcg / (2 + 1 / math.log2(3)))
    assert ndcg(["a", "b"], judged, 10) == 1.0
    assert ndcg(ranked, judged, 1) == 0.0
    assert recall(ranked, judged, 2) == 0.5
    assert reciprocal_rank(ranked, judged, 10) == 0.5
    assert reciprocal_rank(["z", "x"], judged, 10) == 0.0


def test_every_judged_query_counts_even_without_hits():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 0}}
    scores = score_run({"q1": ["a"]}, qrels, k=10)
    assert scores == {"ndcg@10": 0.5, "recall@10": 0.5, "mrr@10": 0.5}  # q3 has nothing relevant


def test_bad_qrels_name_the_line(tmp_path):
    path = tmp_path / "qrels.tsv"
    path.write_text("qid\tfile\trelevance\nq1\ta.md\t1\nq2\tb.md\tmaybe\n", "utf-8")
    with pytest.raises(ValueError, match="line 3"):
        read_qrels(path)


DOCS = {
    "bread.md": "# Bread\n\nBake the sourdough loaf at 230 degrees for forty minutes.\n",
    "stars/neutron.md": "# Stars\n\nA neutron star is the collapsed core of a massive star.\n",
    "rust.md": "# Rust\n\nEach value in Rust has exactly one owner, which drops it.\n",
}
QUERIES = [
    ("q1", "How long do I bake sourdough?", "bread.md"),
    ("q2", "What is a neutron star?", "stars/neutron.md"),
    ("q3", "Who owns a value in Rust?", "rust.md"),
]


@pytest.fixture
def benchmark(tmp_path):
    corpus = tmp_path / "docs"
    for name, text in DOCS.items():
        (corpus / name).parent.mkdir(parents=True, exist_ok=True)
        (corpus / name).write_text(text, "utf-8")
    queries, qrels = tmp_path / "queries.jsonl", tmp_path / "qrels.tsv"
    queries.write_text("".join(json.dumps({"qid": q, "query": t}) + "\n" for q, t, _ in QUERIES))
    qrels.write_text("qid\tfile\trelevance\n" + "".join(f"{q}\t{f}\t1\n" for q, _, f in QUERIES))
    return ["--corpus", str(corpus), "--queries", str(queries), "--qrels", str(qrels)]


@pytest.mark.integration
def test_evaluate_ingests_once_then_reuses_the_index(prefect_backend, benchmark, tmp_path, capsys):
    uri = str(tmp_path / "index")
    assert main([*benchmark, "--index", uri]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["queries"] == report["judged_queries"] == 3
    assert set(report["modes"]) == {"vector", "fts", "hybrid"}
    for scores in report["modes"].values():
        assert set(scores) == {"ndcg@10", "recall@10", "mrr@10"}
        assert scores["recall@10"] == 1.0  # three documents: every one is in the top ten
    assert report["modes"]["vector"]["mrr@10"] == 1.0
    settings = report["settings"]
    assert settings["dataset"]["model"] == report["model"] and settings["dataset"]["analyser"]
    assert set(settings["hybrid"]) == {
        "vector_weight",
        "cjk_vector_weight",
        "depth",
        "full_coverage",
        "min_coverage",
        "translated_weight",
        "across_vector_weight",
    }
    tags = Dataset(uri).run_tags()
    assert main([*benchmark, "--index", uri, "--mode", "fts"]) == 0
    assert set(json.loads(capsys.readouterr().out)["modes"]) == {"fts"}
    assert Dataset(uri).run_tags() == tags, "the existing index was reused, not ingested again"


@pytest.mark.integration
def test_evaluate_without_an_index_uses_a_temporary_one(prefect_backend, benchmark, capsys):
    assert main([*benchmark, "--mode", "hybrid", "-k", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["index"] is None and report["modes"]["hybrid"]["ndcg@1"] == 1.0


def test_evaluate_refuses_missing_inputs(benchmark, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        main([*benchmark[:4], "--qrels", str(tmp_path / "none.tsv")])
    assert exit_.value.code == 2
