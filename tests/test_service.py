"""The HTTP search service, started as `python -m flows.query --serve` on a free local port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest

from flows import service as service_module
from flows.query import main as query_main
from flows.service import SEARCH_THREADS, ServiceSettings, create_app
from tasks.core.records import Block, Document, SourceFile
from tasks.dataset.dataset import Dataset
from tasks.dataset.location import DatasetError
from tasks.dataset.schema import Fingerprint
from tasks.embed.models import DEFAULT_MODEL, get_embedder
from tasks.search.searcher import Searcher
from tasks.text.split import SplitSettings, split_document

from .commands import own_prefect_home, run_module
from .conftest import ROOT
from .cross_encoder import build_tiny_cross_encoder
from .test_query import build_index, document

pytestmark = pytest.mark.integration

# A heading that reads like SQL: a filter for it must match it literally, and nothing else.
QUOTED_SECTION = "It's ' OR 1=1 -- notes"


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


class Service(NamedTuple):
    base: str  # http://127.0.0.1:PORT
    uri: str  # the dataset it serves
    log: Path  # its stdout and stderr


@contextmanager
def running_service(uri: str, root: Path, *options: str) -> Iterator[Service]:
    """`python -m flows.query --serve --index URI [options]` on a free port until healthy;
    always stopped."""
    port = free_port()
    log = root / f"service-{port}.log"  # a file, not a pipe: nobody reads it while it runs
    command = [sys.executable, "-m", "flows.query", "--serve", "--index", uri, "--port", str(port)]
    with log.open("w") as output:
        process = subprocess.Popen(
            [*command, *options],
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
        yield Service(base, uri, log)
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


@pytest.fixture(scope="module")
def dataset_uri(tmp_path_factory) -> str:
    uri = str(tmp_path_factory.mktemp("service") / "index")
    write(
        uri,
        ("rust.md", "Ownership", "Each value in Rust has a single owner that drops it."),
        ("bread.md", "Baking", "Bake the sourdough bread at 230 degrees for forty minutes."),
        ("quotes.md", QUOTED_SECTION, "Notes about quoting values in SQL strings."),
    )
    return uri


@pytest.fixture(scope="module")
def service(dataset_uri, tmp_path_factory) -> Iterator[Service]:
    """A running service on a fresh dataset, with the default limits and no reranker; no
    rate limit: these tests send requests as fast as it answers (tests/test_rate_limit.py
    checks the limit)."""
    root = tmp_path_factory.mktemp("plain")
    with running_service(dataset_uri, root, "--rate-limit", "off") as running:
        yield running


def test_health_and_stats(service):
    base, uri = service.base, service.uri
    health = httpx.get(f"{base}/health").json()
    assert health["status"] == "ok" and health["index"] == uri
    stats = httpx.get(f"{base}/stats").json()
    assert stats["documents"] == stats["chunks"] >= 2 and stats["default_mode"] == "hybrid"


def test_search_returns_the_cli_json_schema(service):
    base = service.base
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


def test_search_returns_the_text_around_each_hit_when_asked(service):
    url, body = f"{service.base}/search", {"text": "Who owns a value in Rust?", "k": 1}
    plain = httpx.post(url, json=body).json()[0]
    assert (plain["context"], plain["context_start"], plain["context_end"]) == (None, None, None)
    for extra in ({"context": 2}, {"expand": "section"}):  # one-chunk documents here
        hit = httpx.post(url, json=body | extra).json()[0]
        assert (hit["context"], hit["context_start"], hit["context_end"]) == (
            plain["text"],
            0,
            len(plain["text"]),
        )
    refused = httpx.post(url, json=body | {"context": 1, "expand": "section"})
    assert refused.status_code == 422
    assert refused.json()["problems"] == [
        {"field": "body", "message": "context and expand cannot be combined: choose one"}
    ]


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
    base = service.base
    response = httpx.post(f"{base}/search", json=body)
    assert response.status_code == 422
    assert message in response.text


def test_new_table_versions_show_up_without_a_restart(service):
    base, uri = service.base, service.uri
    before = httpx.get(f"{base}/health").json()["table_version"]
    write(uri, ("stars.md", "Neutron stars", "A neutron star is the collapsed core of a star."))
    deadline = time.monotonic() + 30  # the service looks for new versions once a second
    while httpx.get(f"{base}/health").json()["table_version"] == before:
        assert time.monotonic() < deadline, "the new version never showed up"
        time.sleep(0.2)
    hits = httpx.post(f"{base}/search", json={"text": "collapsed stellar core", "k": 1}).json()
    assert hits[0]["doc_id"] == "stars.md"


def test_the_question_may_come_as_query_like_in_batch_files(service):
    base = service.base
    hits = httpx.post(f"{base}/search", json={"query": "Who owns a value in Rust?", "k": 1})
    assert hits.status_code == 200 and hits.json()[0]["doc_id"] == "rust.md"


# Paths a caller might hope the service opens: none is, none is repeated in an answer.
PATHS = ["/etc/passwd", "../../../../etc/shadow", "file:///etc/hosts", "C:\\Windows\\win.ini"]
LIMITS = ServiceSettings()
HUGE = 16 * LIMITS.max_body_bytes


def deeply_nested(depth: int) -> bytes:
    return b'{"text": "x", "source": ' + b"[" * depth + b"]" * depth + b"}"


# (what is sent: a JSON value, or raw bytes as the body), the status, the error code
HOSTILE: dict[str, tuple[object, int, str]] = {
    "huge body": ({"text": "a" * HUGE}, 413, "body_too_large"),
    "huge question under the body cap": (
        {"text": "a" * (LIMITS.max_question_chars + 1)},
        422,
        "invalid_request",
    ),
    "nested deeper than the parser goes": (deeply_nested(20_000), 400, "invalid_json"),
    "nested where text belongs": (deeply_nested(50), 422, "invalid_request"),
    "objects nested deep": (b'{"a": ' * 8_000 + b"1" + b"}" * 8_000, 400, "invalid_json"),
    "not JSON": (b'{"text": "who owns', 400, "invalid_json"),
    "not UTF-8": (b'{"text": "\xff\xfe"}', 400, "invalid_json"),
    "a 5,000-digit number": (b'{"text": "x", "k": 1' + b"0" * 5000 + b"}", 400, "invalid_json"),
    "NaN score floor": (b'{"text": "x", "min_score": NaN}', 422, "invalid_request"),
    "an array": ([{"text": "x"}], 422, "invalid_request"),
    "a string": ("who owns a value", 422, "invalid_request"),
    "text a number": ({"text": 5}, 422, "invalid_request"),
    "text null": ({"text": None}, 422, "invalid_request"),
    "text an operator object": ({"text": {"$ne": ""}}, 422, "invalid_request"),
    "k a string": ({"text": "x", "k": "5"}, 422, "invalid_request"),
    "k a fraction": ({"text": "x", "k": 2.5}, 422, "invalid_request"),
    "k a boolean": ({"text": "x", "k": True}, 422, "invalid_request"),
    "k above the service's cap": ({"text": "x", "k": LIMITS.max_k + 1}, 422, "invalid_request"),
    "k huge": ({"text": "x", "k": 10**12}, 422, "invalid_request"),
    "rerank_depth above the cap": (
        {"text": "x", "rerank_depth": LIMITS.max_rerank_depth + 1},
        422,
        "invalid_request",
    ),
    "per_doc a string": ({"text": "x", "per_doc": "yes"}, 422, "invalid_request"),
    "mode a number": ({"text": "x", "mode": 1}, 422, "invalid_request"),
    "since a number": ({"text": "x", "since": 1_700_000_000}, 422, "invalid_request"),
    "rerank on a service without one": ({"text": "x", "rerank": True}, 422, "no_reranker"),
    "NUL in the question": ({"text": "who\x00owns"}, 422, "invalid_request"),
    "escape sequence in the question": ({"text": "\x1b[2Jowner"}, 422, "invalid_request"),
    "lone surrogate in the question": (b'{"text": "owner \\ud800"}', 422, "invalid_request"),
    "NUL in a section filter": ({"text": "x", "section": "Own\x00"}, 422, "invalid_request"),
    "bell in a source filter": ({"text": "x", "source": "*\x07"}, 422, "invalid_request"),
    "SQL in type": ({"text": "x", "type": "md' OR '1'='1"}, 422, "invalid_request"),
    "SQL in mode": ({"text": "x", "mode": "vector; DROP TABLE chunks"}, 422, "invalid_request"),
    "SQL in since": ({"text": "x", "since": "2024-01-01' OR 1=1 --"}, 422, "invalid_request"),
    "SQL as a key": ({"text": "x", "k = 1; DROP TABLE chunks": 1}, 422, "invalid_request"),
    **{
        f"a path in {field}": ({"text": "x", field: PATHS[0]}, 422, "invalid_request")
        for field in ("mode", "type", "since", "until", "rerank", "index", "model")
    },
    "a path as a key": ({"text": "x", PATHS[1]: True}, 422, "invalid_request"),
}


def send(base: str, what: object) -> httpx.Response:
    if isinstance(what, bytes):
        headers = {"content-type": "application/json"}
        return httpx.post(f"{base}/search", content=what, headers=headers, timeout=60)
    return httpx.post(f"{base}/search", json=what, timeout=60)


def dataset_state(uri: str) -> tuple[int, int, int, int]:
    """The chunks and ledger tables' versions and row counts, read apart from the service."""
    dataset = Dataset(uri)
    chunks, ledger = dataset.chunks, dataset.documents
    return chunks.version, chunks.count_rows(), ledger.version, ledger.count_rows()


def assert_tells_nothing(response: httpx.Response, uri: str) -> None:
    """A plain JSON error: a code and a message, no server path, traceback or echo."""
    body = response.json()
    assert isinstance(body["error"], str) and isinstance(body["message"], str)
    assert set(body) <= {"error", "message", "problems"}
    for problem in body.get("problems", []):
        assert set(problem) == {"field", "message"}
    for secret in [uri, str(ROOT), "Traceback", "pydantic", *PATHS]:
        assert secret not in response.text
    assert len(response.content) < 4096


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_body_is_a_plain_4xx_and_leaves_service_and_dataset_as_they_were(service, case):
    what, status, code = HOSTILE[case]
    health = httpx.get(f"{service.base}/health").json()
    before = dataset_state(service.uri)
    response = send(service.base, what)
    assert (response.status_code, response.json()["error"]) == (status, code)
    assert_tells_nothing(response, service.uri)
    after = httpx.get(f"{service.base}/health")
    assert after.status_code == 200
    assert after.json()["table_version"] == health["table_version"]
    assert dataset_state(service.uri) == before
    ask = {"text": "Who owns a value in Rust?", "k": 1}
    assert httpx.post(f"{service.base}/search", json=ask).json()[0]["doc_id"] == "rust.md"


def test_a_huge_body_of_undeclared_length_is_a_413(service):
    chunk = b" " * 8192

    def body() -> Iterator[bytes]:  # no Content-Length: sent chunked
        yield b'{"text": "'
        for _ in range(HUGE // len(chunk)):
            yield chunk
        yield b'"}'

    response = httpx.post(
        f"{service.base}/search",
        content=body(),
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert response.status_code == 413 and response.json()["error"] == "body_too_large"
    assert httpx.get(f"{service.base}/health").status_code == 200


def test_the_limits_are_named_and_the_log_has_the_details(service):
    response = send(service.base, {"text": "x", "k": LIMITS.max_k + 1, "colour": "red"})
    assert response.status_code == 422
    assert response.json()["problems"] == [{"field": "colour", "message": "not a search option"}]
    over = send(service.base, {"text": "x" * (LIMITS.max_question_chars + 1), "k": 500})
    assert over.json()["problems"] == [
        {
            "field": "text",
            "message": f"at most {LIMITS.max_question_chars} characters on this service",
        },
        {"field": "k", "message": f"at most {LIMITS.max_k} hits on this service"},
    ]
    assert "invalid body" in service.log.read_text()


def test_paths_and_quotes_in_search_texts_are_only_searched_for(service):
    """Question, source and section are free text: a path or SQL in them is searched for
    literally (answered, not refused), and no file outside the dataset is read."""
    known = {"rust.md", "bread.md", "quotes.md", "stars.md"}
    before = dataset_state(service.uri)
    for path in PATHS:
        for body in [{"text": path}, {"text": "x", "source": path}, {"text": "x", "section": path}]:
            response = send(service.base, {**body, "k": 5})
            assert response.status_code == 200
            assert {hit["doc_id"] for hit in response.json()} <= known
            assert "root:" not in response.text  # no line of /etc/passwd
    injections = {
        "' OR 1=1 --": {"quotes.md"},  # the one heading that holds it, literally
        "' OR '1'='1": set(),
        "'); DELETE FROM chunks; --": set(),
        "%": set(),
        "_": set(),
    }
    for injection, expected in injections.items():
        for field in ("section", "source"):
            response = send(service.base, {"text": "notes", field: injection, "k": 5})
            assert response.status_code == 200, (field, injection)
            hits = {hit["doc_id"] for hit in response.json()}
            assert hits == (expected if field == "section" else set()), (field, injection)
    tabbed = send(service.base, {"text": "who owns\ta value\nin Rust?", "k": 1})
    assert tabbed.status_code == 200 and tabbed.json()[0]["doc_id"] == "rust.md"
    assert dataset_state(service.uri) == before


@pytest.fixture(scope="module")
def tiny_ce(tmp_path_factory) -> str:
    return str(build_tiny_cross_encoder(tmp_path_factory.mktemp("models") / "tiny-ce"))


def test_the_cross_encoder_comes_from_the_command_line_only(dataset_uri, tiny_ce, tmp_path_factory):
    root = tmp_path_factory.mktemp("reranking")
    body = {"text": "Who owns a value in Rust?", "k": 3, "mode": "vector"}
    with running_service(dataset_uri, root, "--rerank", tiny_ce) as reranking:
        default = send(reranking.base, body).json()
        switched_on = send(reranking.base, {**body, "rerank": True}).json()
        plain = send(reranking.base, {**body, "rerank": False}).json()
        named = [send(reranking.base, {**body, "rerank": path}) for path in [tiny_ce, *PATHS]]
    assert default == switched_on
    assert {hit["chunk_id"] for hit in default} == {hit["chunk_id"] for hit in plain}
    scores = [hit["score"] for hit in default]
    assert scores == sorted(scores, reverse=True) and all(0 < score < 1 for score in scores)
    assert [hit["score"] for hit in default] != [hit["score"] for hit in plain]
    for response in named:
        assert response.status_code == 422 and tiny_ce not in response.text
        assert_tells_nothing(response, dataset_uri)
    assert len({response.text for response in named}) == 1, "every folder refused alike"
    assert f"re-ranking with {tiny_ce}" in reranking.log.read_text()
    missing = run_module(
        "flows.query",
        "--serve",
        "--index",
        dataset_uri,
        "--rerank",
        str(root / "nowhere"),
        "--port",
        str(free_port()),
        env=own_prefect_home(root / "prefect"),
        timeout=300,
    )
    assert missing.returncode == 1 and missing.stderr.startswith("error: no cross-encoder at ")


def test_serve_takes_no_per_request_search_options(capsys):
    with pytest.raises(SystemExit) as exit_:
        query_main(["--serve", "-k", "3", "--mode", "fts"])
    assert exit_.value.code == 2
    assert "--serve takes no -k, --mode: each request sets its own" in capsys.readouterr().err


@pytest.fixture
def hash_index(tmp_path) -> str:
    uri = str(tmp_path / "index")
    build_index(uri, [document("notes.md", [("Intro", "common words about zebras")])])
    return uri


def test_a_search_past_the_time_limit_is_a_503_and_abandoned_searches_stay_bounded(
    hash_index, monkeypatch
):
    from fastapi.testclient import TestClient

    release, started = threading.Event(), []
    real_find = service_module.find

    def held(*args):  # the real search, once the test lets it go on
        started.append(1)
        release.wait(60)
        return real_find(*args)

    monkeypatch.setattr(service_module, "find", held)
    limits = ServiceSettings(search_timeout=0.2)
    client = TestClient(create_app(Searcher(Dataset(hash_index)), limits))
    body = {"text": "zebras", "mode": "fts"}
    try:
        for _ in range(SEARCH_THREADS + 2):  # the last two wait for a thread in vain
            late = client.post("/search", json=body)
            assert late.status_code == 503
            assert late.json() == {
                "error": "timeout",
                "message": "the search took longer than 0.2 s; ask for fewer hits or "
                "candidates, or try again later",
            }
        assert len(started) == SEARCH_THREADS
    finally:
        release.set()
    answered = client.post("/search", json=body)
    assert answered.status_code == 200 and answered.json()[0]["doc_id"] == "notes.md"
    assert len(started) == SEARCH_THREADS + 1, "the abandoned waiting searches never ran"


def test_a_failing_search_is_a_plain_500_or_409_and_the_log_has_the_details(
    hash_index, monkeypatch, caplog
):
    from fastapi.testclient import TestClient

    client = TestClient(create_app(Searcher(Dataset(hash_index))), raise_server_exceptions=False)
    for failure, status, code in [
        (RuntimeError(f"disk full under {hash_index}"), 500, "internal_error"),
        (DatasetError(f"no index at {hash_index}"), 409, "dataset_error"),
    ]:

        def failing(*args, failure=failure):
            raise failure

        monkeypatch.setattr(service_module, "find", failing)
        response = client.post("/search", json={"text": "zebras"})
        assert (response.status_code, response.json()["error"]) == (status, code)
        assert_tells_nothing(response, hash_index)
        assert str(failure) in caplog.text


def test_the_service_binds_to_localhost_unless_told_otherwise():
    assert ServiceSettings().host == "127.0.0.1"
