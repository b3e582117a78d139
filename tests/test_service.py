"""The HTTP search service, started as `python -m flows.query --serve` on a free local port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

from flows.service import ServiceSettings
from tasks.core.records import Block, Document, SourceFile
from tasks.dataset.dataset import Dataset
from tasks.dataset.schema import Fingerprint
from tasks.embed.models import DEFAULT_MODEL, get_embedder
from tasks.text.split import SplitSettings, split_document

from .conftest import ROOT
from .cross_encoder import build_tiny_cross_encoder

pytestmark = pytest.mark.integration


def write(uri: str, *documents: tuple[str, str, str]) -> None:
    """Index (doc_id, section, text) documents with the real model, as ingest would."""
    embedder = get_embedder(DEFAULT_MODEL)
    settings = SplitSettings()
    dataset = Dataset(uri)
    dataset.prepare(Fingerprint.of(embedder.info, settings))
    docs = [
        Document(
            SourceFile(doc_id, f"/corpus/{doc_id}", 1, 0, f"h-{doc_id}", "text/markdown"),
            doc_id,
            (Block(text, section, 1),),
        )
        for doc_id, section, text in documents
    ]
    chunks = [chunk for doc in docs for chunk in split_document(doc, settings).chunks]
    dataset.write_batch(docs, chunks, embedder.encode([c.text for c in chunks]))
    dataset.finalize(f"run-{time.time_ns()}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """A running service on a fresh dataset: (base URL, dataset URI); always stopped."""
    root = tmp_path_factory.mktemp("service")
    uri = str(root / "index")
    write(
        uri,
        ("rust.md", "Ownership", "Each value in Rust has a single owner that drops it."),
        ("bread.md", "Baking", "Bake the sourdough bread at 230 degrees for forty minutes."),
    )
    port = free_port()
    log = root / "service.log"  # a file, not a pipe: nobody reads it while the service runs
    with log.open("w") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "flows.query", "--serve", "--index", uri, "--port", str(port)],
            cwd=ROOT,
            env={**os.environ, "PREFECT_HOME": str(root / "prefect")},
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not _healthy(base):
            assert process.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "the service did not start within 120 s"
            time.sleep(0.2)
        yield base, uri
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _healthy(base: str) -> bool:
    try:
        return httpx.get(f"{base}/health", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def test_health_and_stats(service):
    base, uri = service
    health = httpx.get(f"{base}/health").json()
    assert health["status"] == "ok" and health["index"] == uri
    stats = httpx.get(f"{base}/stats").json()
    assert stats["documents"] == stats["chunks"] >= 2 and stats["default_mode"] == "hybrid"


def test_search_returns_the_cli_json_schema(service):
    base, _ = service
    response = httpx.post(f"{base}/search", json={"text": "Who owns a value in Rust?", "k": 2})
    assert response.status_code == 200
    hits = response.json()
    assert hits[0]["doc_id"] == "rust.md" and hits[0]["section"] == "Ownership"
    fields = {"chunk_id", "doc_id", "source_path", "section", "page_number", "chunk_index"}
    assert all(fields | {"score", "text"} <= hit.keys() for hit in hits)
    filtered = httpx.post(
        f"{base}/search",
        json={"text": "owner", "mode": "vector", "section": "bak", "per_doc": True, "k": 5},
    ).json()
    assert [hit["doc_id"] for hit in filtered] == ["bread.md"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"text": "x", "k": 0}, "greater than or equal to 1"),
        ({"text": "x", "mode": "best"}, "Input should be 'vector', 'fts' or 'hybrid'"),
        ({"text": "x", "since": "' OR 1=1 --"}, "not a date, date-time or age"),
        ({"text": "  "}, "the search text is empty"),
        ({"text": "x", "colour": "red"}, "colour"),
        ({"k": 3}, "text"),
    ],
)
def test_invalid_input_is_a_422_with_a_message(service, body, message):
    base, _ = service
    response = httpx.post(f"{base}/search", json=body)
    assert response.status_code == 422
    assert message in response.text


def test_new_table_versions_show_up_without_a_restart(service):
    base, uri = service
    before = httpx.get(f"{base}/health").json()["table_version"]
    write(uri, ("stars.md", "Neutron stars", "A neutron star is the collapsed core of a star."))
    deadline = time.monotonic() + 30  # the service looks for new versions once a second
    while httpx.get(f"{base}/health").json()["table_version"] == before:
        assert time.monotonic() < deadline, "the new version never showed up"
        time.sleep(0.2)
    hits = httpx.post(f"{base}/search", json={"text": "collapsed stellar core", "k": 1}).json()
    assert hits[0]["doc_id"] == "stars.md"


def test_the_question_may_come_as_query_like_in_batch_files(service):
    base, _ = service
    hits = httpx.post(f"{base}/search", json={"query": "Who owns a value in Rust?", "k": 1})
    assert hits.status_code == 200 and hits.json()[0]["doc_id"] == "rust.md"


def test_the_search_body_takes_a_cross_encoder_to_rerank_with(service, tmp_path):
    base, _ = service
    folder = str(build_tiny_cross_encoder(tmp_path / "tiny-ce"))
    body = {"text": "Who owns a value in Rust?", "k": 3, "mode": "vector"}
    plain = httpx.post(f"{base}/search", json=body).json()
    reranked = httpx.post(f"{base}/search", json={**body, "rerank": folder}, timeout=60).json()
    assert {hit["chunk_id"] for hit in reranked} == {hit["chunk_id"] for hit in plain}
    scores = [hit["score"] for hit in reranked]
    assert scores == sorted(scores, reverse=True) and all(0 < score < 1 for score in scores)
    missing = httpx.post(f"{base}/search", json={**body, "rerank": str(tmp_path / "none")})
    assert missing.status_code == 422 and "no cross-encoder at" in missing.text


def test_the_service_binds_to_localhost_unless_told_otherwise():
    assert ServiceSettings().host == "127.0.0.1"
