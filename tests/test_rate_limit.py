"""A client that floods the service gets 429 rather than slowing everyone (flows/service.py,
RateLimit): `python -m flows.query --serve --rate-limit 4/minute` with a token; each test's
client speaks from its own loopback address (127.0.0.x), which is what the service tells
clients apart by. A per-minute limit, so that a slow machine cannot spread a burst out of it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from flows.service import ServiceSettings, rates

from .test_service import running_service
from .test_service_token import ACCEPT, INITIALIZE, TOKEN, bearer, dataset  # noqa: F401

pytestmark = pytest.mark.integration

LIMIT = 4  # requests a minute per client


@pytest.fixture(scope="module")
def service(dataset, tmp_path_factory):  # noqa: F811
    root = tmp_path_factory.mktemp("rate-limit")
    (root / "token").write_text(TOKEN, "utf-8")
    options = ("--token-file", str(root / "token"), "--rate-limit", f"{LIMIT}/minute")
    with running_service(dataset, root, *options) as running:
        yield running


def client(address: str) -> httpx.Client:
    """An HTTP client whose requests come from `address` (any 127.x.x.x reaches loopback)."""
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=60)


def assert_refused(response: httpx.Response) -> dict[str, Any]:
    """A 429 with a Retry-After of whole seconds within the minute, and a one-line JSON body."""
    assert response.status_code == 429, response.text
    assert 1 <= int(response.headers["Retry-After"]) <= 60
    assert "\n" not in response.text
    return response.json()


def test_a_burst_on_search_gets_429_others_are_served_and_health_stays_open(service):
    search = {"text": "zebras", "k": 1}
    with client("127.0.0.2") as flooding, client("127.0.0.3") as other:
        answers = [
            flooding.post(f"{service.base}/search", json=search, headers=bearer(TOKEN))
            for _ in range(LIMIT + 2)
        ]
        assert [a.status_code for a in answers] == [200] * LIMIT + [429, 429]
        body = assert_refused(answers[-1])
        assert body["error"] == "too_many_requests"
        assert body["message"].startswith(
            f"too many requests from this client: at most {LIMIT} per minute; try again in "
        )
        # Refused before the token is looked at: a flood of guesses is refused alike.
        assert_refused(flooding.post(f"{service.base}/search", json=search))
        assert_refused(flooding.get(f"{service.base}/stats", headers=bearer(TOKEN)))
        assert_refused(flooding.get(f"{service.base}/?q=zebras", headers=bearer(TOKEN)))
        assert flooding.get(f"{service.base}/health").status_code == 200
        served = other.post(f"{service.base}/search", json=search, headers=bearer(TOKEN))
        assert served.status_code == 200 and served.json()[0]["doc_id"] == "zebras.md"
    assert "refusing requests from 127.0.0.2: over 4 per 1 minute" in service.log.read_text()


def mcp_search(base: str, address: str) -> Any:
    """The SDK's client from `address`: its tools and a search, or the error it raised."""

    async def script() -> Any:
        transport = httpx2.AsyncHTTPTransport(local_address=address)
        async with httpx2.AsyncClient(
            headers=bearer(TOKEN), timeout=30, transport=transport
        ) as http:
            async with Client(streamable_http_client(f"{base}/mcp", http_client=http)) as mcp:
                await mcp.list_tools()
                return await mcp.call_tool("search", {"text": "sourdough", "k": 1})

    async def caught() -> Any:
        try:
            return await script()
        except Exception as exc:  # noqa: BLE001 - what the client raised is the result
            return exc

    return asyncio.run(asyncio.wait_for(caught(), 60))


def test_a_burst_on_mcp_gets_429_with_a_json_rpc_error_the_client_shows(service):
    headers = bearer(TOKEN) | ACCEPT
    with client("127.0.0.4") as flooding:
        answers = [
            flooding.post(f"{service.base}/mcp", json=INITIALIZE, headers=headers)
            for _ in range(LIMIT + 1)
        ]
        assert [a.status_code for a in answers] == [200] * LIMIT + [429]
        body = assert_refused(answers[-1])
        assert body["jsonrpc"] == "2.0" and body["id"] is None
        assert body["error"]["message"].startswith("too many requests from this client")
        assert flooding.get(f"{service.base}/health").status_code == 200
    refused = mcp_search(service.base, "127.0.0.4")
    assert isinstance(refused, BaseException), refused
    assert "too many requests from this client" in "".join(map(str, _chain(refused)))
    served = mcp_search(service.base, "127.0.0.5")
    assert not isinstance(served, BaseException), served
    assert not served.is_error and served.structured_content["hits"][0]["doc_id"] == "bread.md"


def _chain(exc: BaseException) -> list[BaseException]:
    """An exception and those it groups or was raised from (anyio's task groups wrap them)."""
    found = [exc]
    for inner in getattr(exc, "exceptions", ()):
        found += _chain(inner)
    if exc.__cause__ is not None:
        found += _chain(exc.__cause__)
    return found


def test_a_huge_mcp_body_is_a_413(service):
    huge = {**INITIALIZE, "params": {**INITIALIZE["params"], "pad": "x" * 100_000}}
    with client("127.0.0.6") as sender:
        response = sender.post(
            f"{service.base}/mcp", content=json.dumps(huge), headers=bearer(TOKEN) | ACCEPT
        )
    assert response.status_code == 413 and response.json()["error"] == "body_too_large"


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("fast", "not a rate: give N/second, N/minute or N/hour"),
        ("0/second", "a rate allows at least 1 request"),
        ("10/fortnight", "not a rate"),
    ],
)
def test_a_rate_that_is_not_one_is_refused(given, says):
    with pytest.raises(ValueError, match=says):
        ServiceSettings(rate_limit=given)


def test_the_default_limit_is_on_and_off_switches_it_off():
    assert [str(rate) for rate in rates(ServiceSettings().rate_limit)] == ["30 per 1 second"]
    assert rates("30/second; 600 per minute")[1].amount == 600
    assert rates("off") == rates(" OFF ") == []
