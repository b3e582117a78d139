"""A service safe to expose (flows/service.py): with a token, every path but /health needs it as
a bearer token, /mcp included; bound beyond loopback it refuses to start without one; a
question on this machine sends the token from $DOC_INDEXER_TOKEN, else goes the cold way."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from flows.service_client import TOKEN_ENV

from .commands import imported_modules, run_module, with_import_times
from .test_cli_imports import no_prefect_api
from .test_query import build_index, document
from .test_service import free_port, running_service

pytestmark = pytest.mark.integration

TOKEN = "s3cret-token-for-the-tests-0123456789"
ACCEPT = {"Accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> str:
    uri = str(tmp_path_factory.mktemp("token") / "index")
    build_index(
        uri,
        [
            document("zebras.md", [("Savanna", "zebras graze on the savanna grass")]),
            document("bread.md", [("Baking", "sourdough bread needs a starter and time")]),
        ],
    )
    return uri


@pytest.fixture(scope="module")
def service(dataset, tmp_path_factory):
    root = tmp_path_factory.mktemp("token-service")
    token_file = root / "token"
    token_file.write_text(TOKEN + "\n", "utf-8")
    with running_service(dataset, root, "--token-file", str(token_file)) as running:
        yield running


def bearer(token: str | None) -> dict[str, str]:
    return {} if token is None else {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize(
    ("token", "status"), [(None, 401), ("wrong-token-of-the-same-size-0123456", 401), (TOKEN, 200)]
)
def test_search_stats_and_mcp_need_the_token(service, token, status):
    headers = bearer(token)
    search = httpx.post(f"{service.base}/search", json={"text": "zebras"}, headers=headers)
    stats = httpx.get(f"{service.base}/stats", headers=headers)
    mcp = httpx.post(f"{service.base}/mcp", json=INITIALIZE, headers=headers | ACCEPT)
    assert (search.status_code, stats.status_code, mcp.status_code) == (status, status, status)
    if status == 401:
        assert search.json()["error"] == "unauthorized"
        assert search.headers["WWW-Authenticate"] == "Bearer"
        assert TOKEN not in search.text
    else:
        assert search.json()[0]["doc_id"] == "zebras.md"
        assert mcp.json()["result"]["serverInfo"]["name"] == "doc-indexer"
    assert httpx.get(f"{service.base}/health").status_code == 200  # open either way


def test_a_scheme_other_than_bearer_is_refused(service):
    basic = {"Authorization": f"Basic {TOKEN}"}
    assert httpx.get(f"{service.base}/stats", headers=basic).status_code == 401


def test_the_mcp_client_over_http_gets_the_hits_of_post_search(service):
    """The SDK's client over Streamable HTTP: the tools, each called, and the prompt."""
    body = {"text": "sourdough starter", "k": 2}

    async def script() -> Any:
        async with httpx2.AsyncClient(headers=bearer(TOKEN), timeout=30) as http:
            transport = streamable_http_client(f"{service.base}/mcp", http_client=http)
            async with Client(transport) as client:
                tools = await client.list_tools()
                found = await client.call_tool("search", body)
                hit = found.structured_content["hits"][0]
                others = [
                    await client.call_tool("read", {"chunk_id": hit["chunk_id"]}),
                    await client.call_tool("sources", {"status": "indexed"}),
                    await client.call_tool("stats", {}),
                ]
                prompt = await client.get_prompt(
                    "answer_with_sources", {"question": "how is bread made?", "k": "1"}
                )
                return tools, found, others, prompt

    tools, result, (read, sources, stats), prompt = asyncio.run(asyncio.wait_for(script(), 60))
    assert {tool.name for tool in tools.tools} == {"search", "read", "sources", "stats"}
    assert not result.is_error, result.content
    posted = httpx.post(f"{service.base}/search", json=body, headers=bearer(TOKEN)).json()
    assert result.structured_content["hits"] == posted
    assert posted[0]["doc_id"] == "bread.md"
    for answer in (read, sources, stats):
        assert not answer.is_error, answer.content
    assert read.structured_content["text"] == "sourdough bread needs a starter and time"
    listed = sources.structured_content["documents"]
    assert [document["doc_id"] for document in listed] == ["bread.md", "zebras.md"]
    assert stats.structured_content["documents_by_status"] == {"indexed": 2}
    assert "sourdough bread needs a starter" in prompt.messages[0].content.text


def test_a_question_sends_the_token_from_the_environment(service, tmp_path):
    """With $DOC_INDEXER_TOKEN the service answers (no LanceDB loaded here); without it the
    service answers 401 and the question is answered the cold way, with the same hits."""
    outputs = {}
    for name, token in (("with", TOKEN), ("without", None)):
        env = with_import_times(no_prefect_api(str(tmp_path / "prefect")))
        env.pop(TOKEN_ENV, None)
        if token:
            env[TOKEN_ENV] = token
        result = run_module(
            "flows.query", "zebras", "--index", service.uri, "--json", env=env, timeout=120
        )
        assert result.returncode == 0, result.stderr[-2000:]
        outputs[name] = (result.stdout, "lancedb" in imported_modules(result.stderr))
    assert outputs["with"][1] is False, "the service did not answer the question with the token"
    assert outputs["without"][1] is True, "the question without the token went to the service"
    assert outputs["with"][0] == outputs["without"][0]


def serve(dataset: str, tmp_path: Path, *options: str, token: str | None = None) -> Any:
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    env["PREFECT_HOME"] = str(tmp_path / "prefect")
    if token is not None:
        env[TOKEN_ENV] = token
    port = str(free_port())
    return run_module(
        "flows.query", "--serve", "--index", dataset, "--port", port, *options, env=env, timeout=60
    )


def test_a_bind_beyond_loopback_without_a_token_refuses_to_start(dataset, tmp_path):
    result = serve(dataset, tmp_path, "--host", "0.0.0.0")
    assert result.returncode == 2
    assert "refusing to serve on 0.0.0.0 without a token" in result.stderr
    assert "--token-file PATH" in result.stderr and TOKEN_ENV in result.stderr
    assert "Traceback" not in result.stderr and "serving" not in result.stdout


@pytest.mark.parametrize(
    ("options", "token", "says"),
    [
        ((), "short", "must be at least 16 printable ASCII characters"),
        (("--token-file", "/nonexistent/token"), None, "cannot read --token-file"),
    ],
)
def test_an_unusable_token_is_refused(dataset, tmp_path, options, token, says):
    result = serve(dataset, tmp_path, "--host", "0.0.0.0", *options, token=token)
    assert result.returncode == 2 and says in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
