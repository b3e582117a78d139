"""`--gate`: a run that makes search worse on the user's questions is undone, through the
real flow (default model, real Prefect and LanceDB)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasks.dataset.dataset import Dataset

pytestmark = pytest.mark.integration

DOCS = {
    "lighthouse.md": "# Lighthouses\n\nLighthouse keepers trimmed the lamp wicks every evening "
    "and polished the lens so ships could see the light far out at sea.\n",
    "bread.md": "# Sourdough\n\nA sourdough starter of flour and water ferments for several "
    "days before you mix the dough and bake the bread.\n",
    "bees.md": "# Bees\n\nHoney bees tell other workers the direction and distance of flowers "
    "by a waggle dance inside the hive.\n",
}
QUESTIONS = {
    "q1": ("What did lighthouse keepers do every evening?", "lighthouse.md"),
    "q2": ("How long does a sourdough starter ferment?", "bread.md"),
    "q3": ("How do honey bees tell where flowers are?", "bees.md"),
}


def _decoys(folder: Path) -> None:
    """Documents that repeat each question's words without answering it: they push every
    right answer down."""
    for qid, (question, _) in QUESTIONS.items():
        for n in range(4):
            text = f"# {question}\n\n{question} {question} Nobody here knows. {n}\n"
            (folder / f"decoy-{qid}-{n}.md").write_text(text, "utf-8")


@pytest.fixture
def gated(tmp_path) -> tuple[Path, str, list[str]]:
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in DOCS.items():
        (folder / name).write_text(text, "utf-8")
    queries, qrels = tmp_path / "q.jsonl", tmp_path / "qrels.tsv"
    queries.write_text(
        "".join(json.dumps({"qid": q, "query": text}) + "\n" for q, (text, _) in QUESTIONS.items())
    )
    judged = "".join(f"{q}\t{doc}\t1\n" for q, (_, doc) in QUESTIONS.items())
    qrels.write_text("qid\tfile\trelevance\n" + judged)
    return folder, str(tmp_path / "index"), [str(queries), str(qrels)]


def test_a_run_that_pushes_the_answers_down_is_restored(prefect_backend, gated):
    from flows.ingest import ingest

    folder, uri, gate = gated
    first = ingest(source_dir=str(folder), index_uri=uri, gate=gate)
    assert first.gate is not None and first.gate.before is None and not first.gate.failed
    assert first.gate.after == pytest.approx(1.0)
    kept = sorted(Dataset(uri).ledger())

    _decoys(folder)
    state = ingest(source_dir=str(folder), index_uri=uri, gate=gate, return_state=True)
    assert state.is_failed()
    summary = state.result(raise_on_failure=False)
    outcome = summary.gate
    assert outcome.failed and outcome.restored and outcome.previous_tag == first.run_tag
    assert outcome.before == pytest.approx(first.gate.after)
    assert outcome.before - outcome.after > 0.01
    assert f"{outcome.before:.4f} before, {outcome.after:.4f} after" in state.message
    # the dataset is as the first run left it: no decoy in the ledger or the chunks
    dataset = Dataset(uri)
    assert sorted(dataset.ledger()) == kept
    docs = set(
        dataset.chunks.search().select(["doc_id"]).limit(None).to_arrow()["doc_id"].to_pylist()
    )
    assert docs == set(DOCS)
    rows = {row["measure"]: row["value"] for row in _summary_rows(summary)}
    assert rows["gate restored"] == first.run_tag


def test_a_run_within_the_allowed_drop_is_kept(prefect_backend, gated):
    from flows.ingest import ingest

    folder, uri, gate = gated
    ingest(source_dir=str(folder), index_uri=uri, gate=gate)
    _decoys(folder)
    summary = ingest(source_dir=str(folder), index_uri=uri, gate=gate, max_drop=1.0)
    assert summary.gate is not None and not summary.gate.failed and not summary.gate.restored
    assert len(Dataset(uri).ledger()) == len(DOCS) + 4 * len(QUESTIONS)


def test_the_gate_needs_two_existing_files(tmp_path):
    from tasks.ingest.settings import GateSettings

    with pytest.raises(ValueError, match="two files"):
        GateSettings(gate=[str(tmp_path)])
    with pytest.raises(ValueError, match="not found"):
        GateSettings(gate=[str(tmp_path / "a"), str(tmp_path / "b")])


def _summary_rows(summary) -> list[dict]:
    from tasks.ingest.report import summary_rows

    return summary_rows(summary)
