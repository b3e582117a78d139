# Over 300 lines: the service's limits, token, middleware and endpoints around one app.
"""The search service: one open dataset and model, answering over HTTP.

    python -m flows.query --serve [--index URI] [--rerank PATH] [--host 127.0.0.1]
                          [--port 8765] [--max-k N] [--search-timeout SECONDS] [...]

GET /health, POST /search (a question and the command line's search options as JSON; the
hits as the command line's --json prints them), GET /stats, the MCP server of
flows/mcp_server.py over Streamable HTTP at /mcp (stateless, JSON answers), and the search
page for people at / (flows/search_page.py; with a token, behind its login form's cookie).
What later ingest runs commit shows up within REFRESH.

The service trusts no request:
- the cross-encoder is the one `--rerank PATH` named when the service started (loaded then);
  a request's "rerank" may only be true or false (default: true when there is one);
- a request is bounded (ServiceSettings, shown in --help): its body size (413), the question's
  length, k and rerank_depth (422), the time its search may take (503);
- an answer other than hits is JSON {"error": CODE, "message": TEXT}, with "problems" (field
  and message) for an invalid body; it never holds a server path, a traceback or a library's
  message, and never echoes what the caller sent: those details go to the service's log;
- with a token (`--token-file PATH` or the DOC_INDEXER_TOKEN environment variable, never a
  command-line value), every path but /health needs `Authorization: Bearer <token>` (401
  otherwise, compared in constant time); bound beyond loopback, it refuses to start without
  one. MCP's search tool goes through the same limits, threads and time limit as POST /search,
  its other tools through the same threads and time limit;
- each client (its address) may make `--rate-limit` requests (every path but /health, the
  MCP server's and the page's included); over it, 429 with Retry-After, before the token or
  the body is read.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import math
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import asdict
from datetime import timedelta
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import field_validator

from flows.service_client import TOKEN_ENV  # the token where no --token-file names one
from tasks.core.options import Settings, option
from tasks.dataset.location import DatasetError
from tasks.search.params import MAX_K, Mode, SearchParams
from tasks.search.request import SearchRequest
from tasks.search.rerank import cross_encoder

# The dataset, the searcher and the models (LanceDB, numpy, onnxruntime) are imported where
# the service starts (`serve`): `flows.query --help` reads ServiceSettings from this module.
if TYPE_CHECKING:
    from limits import RateLimitItem
    from mcp.server.lowlevel import Server

    from flows.search_page import PageSearch
    from tasks.search.searcher import Searcher

# How stale the service's view of the dataset may be: checking for new versions on every
# request costs a few milliseconds a query, once a second well under one.
REFRESH = timedelta(seconds=1)
# Searches that run at once (enough to overlap an object store's round trips). A search that
# outlives its time limit cannot be stopped, only abandoned: it keeps its thread until it
# ends, so a fixed pool bounds what abandoned searches can hold; later requests wait for a
# thread within their own time limit.
SEARCH_THREADS = 8
# At most this many problems of an invalid body are listed in the answer.
MAX_PROBLEMS = 10
# Binds that only this machine reaches: the service needs no token there.
LOOPBACK = ("127.0.0.1", "::1", "localhost")
# The shortest token taken: a typo'd or placeholder token refused rather than guessed.
MIN_TOKEN_CHARS = 16
# Paths answered without the token or the rate limit: a load balancer's or a client's
# liveness probe.
OPEN_PATHS = ("/health",)
MCP_PATH = "/mcp"  # the MCP server over Streamable HTTP
# The --rate-limit that switches the limit off.
NO_RATE_LIMIT = "off"
# The JSON-RPC error code of a refused MCP request (-32000 to -32099: the server's own).
RATE_LIMITED = -32000
# The most clients remembered as being refused (each flood is logged once, when it starts).
MAX_REFUSING = 10_000

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class ServiceSettings(Settings):
    """Where the service listens and how much a request may ask of it."""

    host: str = option("127.0.0.1", "address to bind (this machine only, unless told otherwise)")
    port: int = option(8765, "port", ge=1, le=65535)
    max_body_bytes: int = option(
        65_536, "largest request body in bytes (larger: 413)", ge=1024, metavar="N"
    )
    max_question_chars: int = option(
        2_000, "longest question in characters a request may ask", ge=1, metavar="N"
    )
    max_k: int = option(100, "most hits (k) a request may ask for", ge=1, le=MAX_K, metavar="N")
    max_rerank_depth: int = option(
        200,
        "most candidates (rerank_depth) a request may have re-ranked",
        ge=1,
        le=MAX_K,
        metavar="N",
    )
    search_timeout: float = option(
        30.0,
        "seconds after which a search is answered 503 (it ends in the background)",
        gt=0,
        metavar="SECONDS",
    )
    token_file: str | None = option(
        None,
        f"file holding the bearer token that every path but /health then needs (else "
        f"${TOKEN_ENV}; required beyond loopback)",
        metavar="PATH",
    )
    rate_limit: str = option(
        "30/second",
        "requests one client (its address) may make, /health aside: N/second or N/minute, "
        "several joined by ';' (e.g. 30/second;600/minute); more is answered 429 with "
        f"Retry-After; {NO_RATE_LIMIT} for no limit",
        metavar="RATE",
    )

    @field_validator("rate_limit")
    @classmethod
    def _a_rate(cls, value: str) -> str:
        rates(value)  # a ValueError that says what a rate looks like
        return value


def rates(rate_limit: str) -> list[RateLimitItem]:
    """The limits of a --rate-limit (limits' notation: "30/second;600 per minute"); none for
    NO_RATE_LIMIT. A ValueError for anything else."""
    if rate_limit.strip().lower() == NO_RATE_LIMIT:
        return []
    from limits import parse_many

    try:
        found = parse_many(rate_limit)
    except ValueError:
        raise ValueError(
            f"not a rate: give N/second, N/minute or N/hour (several joined by ';'), or "
            f"{NO_RATE_LIMIT}"
        ) from None
    if any(rate.amount < 1 for rate in found):
        raise ValueError(f"a rate allows at least 1 request (or give {NO_RATE_LIMIT})")
    return found


class ServiceError(Exception):
    """An answer other than hits: HTTP status, error code and a message for the caller."""

    def __init__(
        self, status: int, code: str, message: str, problems: list[dict[str, str]] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.problems = status, code, message, problems

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.code, "message": self.message}
        if self.problems is not None:
            body["problems"] = self.problems
        return body


T = TypeVar("T")


class Searches:
    """The service's searches, POST /search's and the MCP search tool's alike: a request's
    options checked against `limits`, its search run on one of SEARCH_THREADS threads and
    answered 503 past the time limit."""

    def __init__(
        self, searcher: Searcher, limits: ServiceSettings, reranker: str | None = None
    ) -> None:
        self.searcher, self.limits, self.reranker = searcher, limits, reranker
        self.executor = ThreadPoolExecutor(max_workers=SEARCH_THREADS, thread_name_prefix="search")

    async def run(
        self, request: SearchRequest, present: Callable[[Mode, list[dict[str, Any]]], T]
    ) -> T:
        """`present` of the mode the search ran in and the hits for `request`, called on the
        search's thread (the mode read there too: one thread hop a search); a ServiceError
        when the request asks too much, the search runs too long or the dataset refuses it."""
        params = checked_params(request, self.limits, self.reranker)

        def answer() -> T:
            mode = self.searcher.resolve_mode(params.mode)
            return present(mode, find(self.searcher, request.text, params))

        try:
            return await self.bounded(
                answer,
                f"a search ({params.describe()})",
                "the search",
                "ask for fewer hits or candidates, or ",
            )
        except DatasetError as exc:
            log.warning("the dataset refused a search (%s): %s", params.describe(), exc)
            raise ServiceError(
                409,
                "dataset_error",
                "the dataset cannot answer this search (fts and hybrid mode need the full-text "
                "index that ingest builds); the service log says why",
            ) from None

    async def bounded(
        self, work: Callable[[], T], what: str, subject: str = "the request", advice: str = ""
    ) -> T:
        """`work` on one of the search threads, within the search time limit; past it a
        ServiceError (503) that tells the caller `subject` took too long, with `advice`
        before "try again later" (the log names `what`)."""
        running = asyncio.wrap_future(self.executor.submit(work))
        timeout = self.limits.search_timeout
        try:
            return await asyncio.wait_for(running, timeout)
        except TimeoutError:
            log.warning("%s ran past %g s", what, timeout)
            raise ServiceError(
                503,
                "timeout",
                f"{subject} took longer than {timeout:g} s; {advice}try again later",
            ) from None

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


def mcp_server(searches: Searches) -> Server[Any]:
    """The MCP server (flows/mcp_server.py) whose search tool runs through `searches` (the
    service's limits, threads and time limit) and whose other tools run on the same threads
    within the same time limit; a refusal is a tool error with its message."""
    from flows.mcp_server import ToolProblem, create_server

    def problem(exc: ServiceError) -> ToolProblem:
        details = "; ".join(f"{p['field']}: {p['message']}" for p in exc.problems or [])
        return ToolProblem(f"{exc.message} ({details})" if details else exc.message)

    async def search(request: SearchRequest) -> dict[str, Any]:
        try:
            return await searches.run(request, lambda mode, hits: {"mode": mode, "hits": hits})
        except ServiceError as exc:
            raise problem(exc) from None

    async def bounded(work: Callable[[], T], tool: str) -> T:
        try:
            return await searches.bounded(work, f"MCP tool {tool}", f"the tool {tool}")
        except ServiceError as exc:
            raise problem(exc) from None

    return create_server(searches.searcher, search, bounded)


def page_search(searches: Searches) -> PageSearch:
    """The search page's search (flows/search_page.py): POST /search's, through `searches`,
    a refusal as the page's Refused."""
    from flows.search_page import Refused

    async def search(request: SearchRequest) -> tuple[Mode, list[dict[str, Any]]]:
        try:
            return await searches.run(request, lambda mode, hits: (mode, hits))
        except ServiceError as exc:
            raise Refused(exc.status, exc.message, exc.problems) from None

    return search


def create_app(
    searcher: Searcher,
    settings: ServiceSettings | None = None,
    reranker: str | None = None,
    token: str | None = None,
) -> Any:
    """The HTTP service on one open Searcher: GET /health, POST /search, GET /stats and the MCP
    server at /mcp; with `reranker`, the folder of the cross-encoder that re-ranks unless a
    request says no; with `token`, every path but /health needs it as a bearer token."""
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from mcp.server.streamable_http_manager import (
        StreamableHTTPASGIApp,
        StreamableHTTPSessionManager,
    )
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.exceptions import HTTPException

    limits = settings or ServiceSettings()
    searches = Searches(searcher, limits, reranker)
    # Stateless: each POST /mcp is answered on its own (no session to keep or expire), as JSON.
    # On loopback, the SDK's DNS-rebinding check (Host and Origin are this machine's), as its
    # own streamable_http_app sets it.
    loopback = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )
    sessions = StreamableHTTPSessionManager(
        app=mcp_server(searches),
        json_response=True,
        stateless=True,
        security_settings=loopback if limits.host in LOOPBACK else None,
        max_request_body_size=limits.max_body_bytes,
    )

    @asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        async with sessions.run():
            yield
        searches.close()

    app = FastAPI(title="doc-indexer search", lifespan=lifespan)
    app.add_middleware(BodyLimit, limit=limits.max_body_bytes)
    if token is not None:
        app.add_middleware(BearerToken, token=token)  # before the body is read
    if allowed := rates(limits.rate_limit):
        # Outermost: a flood is refused before its token is checked or its body read.
        app.add_middleware(RateLimit, rates=allowed)
    # An ASGI app as the route's endpoint: Starlette runs an endpoint that is not a function
    # as one (its annotation names request handlers only).
    mcp_app: Any = StreamableHTTPASGIApp(sessions)
    app.add_route(MCP_PATH, mcp_app, methods=["GET", "POST", "DELETE"])

    @app.exception_handler(ServiceError)
    async def service_error(request: Request, exc: ServiceError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def invalid_body(request: Request, exc: RequestValidationError) -> JSONResponse:
        return await service_error(request, invalid_request(exc.errors()))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        if exc.status_code == 400:  # FastAPI could not parse the body (e.g. nested too deep)
            log.warning("unreadable body: %s", exc.__cause__ or exc.detail)
            return await service_error(request, not_json())
        phrase = HTTPStatus(exc.status_code).phrase
        error = ServiceError(exc.status_code, phrase.lower().replace(" ", "_"), phrase)
        return JSONResponse(error.body(), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        error = ServiceError(500, "internal_error", "the request failed; the service log says why")
        return JSONResponse(error.body(), status_code=500)

    @app.get("/health")
    def health() -> dict[str, Any]:
        dataset = searcher.dataset
        return {
            "status": "ok",
            "index": dataset.uri,
            "table_version": dataset.chunks.version,
            "default_mode": searcher.resolve_mode(None),  # what a request without "mode" gets
        }

    @app.post("/search", response_model=None)
    async def search(request: SearchRequest) -> JSONResponse:
        # The answer's JSON is written on the search's thread: the event loop and FastAPI's
        # response checks (the hits are plain JSON types already) skip it.
        return await searches.run(request, lambda mode, hits: JSONResponse(hits))

    @app.get("/stats")
    def stats() -> dict[str, Any]:
        from tasks.search.info import index_stats

        return index_stats(searcher)

    from flows.search_page import add_search_page

    add_search_page(app, searcher, page_search(searches), token)  # the page for people at /
    return app


def find(searcher: Searcher, text: str, params: SearchParams) -> list[dict[str, Any]]:
    """The hits for one question, as the command line's --json prints them."""
    return [asdict(hit) for hit in searcher.search(text, params)]


def checked_params(
    request: SearchRequest, limits: ServiceSettings, reranker: str | None
) -> SearchParams:
    """The request's search options, with the service's cross-encoder unless it says no; a
    ServiceError when it asks for more than `limits` allow or for a cross-encoder there is
    not."""
    caps = [
        ("text", len(request.text), limits.max_question_chars, "characters"),
        ("k", request.k, limits.max_k, "hits"),
        ("rerank_depth", request.rerank_depth, limits.max_rerank_depth, "candidates"),
    ]
    problems = [
        {"field": field, "message": f"at most {cap} {unit} on this service"}
        for field, value, cap, unit in caps
        if value > cap
    ]
    if problems:
        raise ServiceError(422, "invalid_request", "the request asks for too much", problems)
    if request.rerank and reranker is None:
        raise ServiceError(
            422, "no_reranker", "this service re-ranks nothing: it was started without --rerank"
        )
    return request.params(reranker)


def invalid_request(errors: Any) -> ServiceError:
    """The pydantic errors of a body as a ServiceError: each problem's field (when it reads
    like a field name) and message, never the input."""
    if any(error.get("type") == "json_invalid" for error in errors):
        return not_json()
    details = [(error.get("loc"), error.get("msg")) for error in errors[:MAX_PROBLEMS]]
    log.warning("invalid body: %.1000r", details)
    problems = [
        {"field": field_name(error.get("loc", ())), "message": problem(error)}
        for error in errors[:MAX_PROBLEMS]
    ]
    return ServiceError(422, "invalid_request", "the request is not a valid search", problems)


def field_name(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as a field path ("body" for the whole body); names that do
    not read like a field (the caller's own keys) are not repeated."""
    parts = [str(part) for part in loc[1:]]  # loc[0] is "body"
    shown = [p if (p.isidentifier() and len(p) <= 40) or p.isdigit() else "…" for p in parts]
    return ".".join(shown) or "body"


def problem(error: Any) -> str:
    if error.get("type") == "extra_forbidden":
        return "not a search option"
    return str(error.get("msg", "invalid")).removeprefix("Value error, ")


def not_json() -> ServiceError:
    return ServiceError(400, "invalid_json", "the body is not a JSON object the service can read")


class BodyLimit:
    """ASGI middleware: a request body larger than `limit` bytes is answered 413 before the
    app sees it, whether or not the request declares its length."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > self.limit:
            await self._too_large(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            body += message.get("body", b"")
            if len(body) > self.limit:
                await self._too_large(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        from fastapi.responses import JSONResponse

        log.warning("refused a body over %d bytes from %s", self.limit, scope.get("client"))

        message = f"the request body is larger than {self.limit} bytes"
        error = ServiceError(413, "body_too_large", message)
        response = JSONResponse(error.body(), status_code=413, headers={"Connection": "close"})
        await response(scope, receive, send)


class RateLimit:
    """ASGI middleware: each client may make `rates` requests (a moving window each, the
    `limits` library's, in memory) to every path but OPEN_PATHS; more are answered 429 with
    Retry-After (whole seconds until the window has room) and a one-line JSON body, for /mcp
    a JSON-RPC error that the MCP client hands its caller. Refused requests do not count.

    The client is the request's address (behind a reverse proxy on this machine, the one its
    X-Forwarded-For names: uvicorn's proxy headers). Not the token: all of a service's clients
    share its one token, so one of them flooding would lock out the others."""

    def __init__(self, app: ASGIApp, rates: list[RateLimitItem]) -> None:
        from limits.storage import MemoryStorage
        from limits.strategies import MovingWindowRateLimiter

        self.app, self.rates = app, rates
        self.limiter = MovingWindowRateLimiter(MemoryStorage())
        self.refusing: set[str] = set()  # clients refused last time: logged once a flood

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        client = scope["client"][0] if scope.get("client") else "unknown"
        # No await between the test and the hits: no other request of the client comes between.
        over = [rate for rate in self.rates if not self.limiter.test(rate, client)]
        if not over:
            for rate in self.rates:
                self.limiter.hit(rate, client)
            self.refusing.discard(client)
            await self.app(scope, receive, send)
            return
        reset = max(self.limiter.get_window_stats(rate, client).reset_time for rate in over)
        wait = max(1, math.ceil(reset - time.time()))
        if client not in self.refusing:
            if len(self.refusing) >= MAX_REFUSING:  # many flooding addresses: start again
                self.refusing.clear()
            self.refusing.add(client)
            log.warning("refusing requests from %s: over %s", client, over[0])
        await self.too_many(over[0], wait, scope["path"])(scope, receive, send)

    @staticmethod
    def too_many(rate: RateLimitItem, wait: int, path: str) -> ASGIApp:
        from fastapi.responses import JSONResponse

        unit = rate.GRANULARITY.name
        window = unit if rate.multiples == 1 else f"{rate.multiples} {unit}s"
        message = (
            f"too many requests from this client: at most {rate.amount} per {window}; "
            f"try again in {wait} s"
        )
        headers = {"Retry-After": str(wait)}
        if path == MCP_PATH or path.startswith(MCP_PATH + "/"):
            error = {"code": RATE_LIMITED, "message": message}
            body: dict[str, Any] = {"jsonrpc": "2.0", "id": None, "error": error}
        else:
            body = ServiceError(429, "too_many_requests", message).body()
        return JSONResponse(body, status_code=429, headers=headers)


class BearerToken:
    """ASGI middleware: every request but those for OPEN_PATHS needs `Authorization: Bearer
    <token>`, compared in constant time (hmac.compare_digest); 401 otherwise. The search
    page's paths also take the cookie its login form sets, and answer the form otherwise."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app, self.token = app, token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        from flows.search_page import LOGIN_PATH, PAGE_PATHS, has_page_cookie, login_page

        headers = dict(scope["headers"])
        scheme, _, given = headers.get(b"authorization", b"").partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.token):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "http" and scope["path"] in PAGE_PATHS:
            # The search page's paths: the login form itself, or the cookie it sets; else the form.
            if scope["path"] == LOGIN_PATH or has_page_cookie(headers, self.token.decode()):
                await self.app(scope, receive, send)
            else:
                await login_page()(scope, receive, send)
            return
        log.warning("refused a request without the right token from %s", scope.get("client"))
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        from fastapi.responses import JSONResponse

        message = "this service needs its token: send the header Authorization: Bearer <token>"
        error = ServiceError(401, "unauthorized", message)
        headers = {"WWW-Authenticate": "Bearer"}
        await JSONResponse(error.body(), status_code=401, headers=headers)(scope, receive, send)


class TokenError(Exception):
    """No usable token where one is needed, or a token file that cannot be used."""


def service_token(settings: ServiceSettings) -> str | None:
    """The bearer token the service requires: the content of --token-file (surrounding
    whitespace removed) or else of $DOC_INDEXER_TOKEN; None when neither is given, which only a
    loopback bind accepts. A TokenError for an unreadable or too short token, or none beyond
    loopback."""
    if settings.token_file is not None:
        try:
            token = Path(settings.token_file).expanduser().read_text("utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or "not UTF-8 text"
            raise TokenError(f"cannot read --token-file {settings.token_file}: {reason}") from None
        where = "--token-file"
    else:
        token, where = os.environ.get(TOKEN_ENV, "").strip(), f"${TOKEN_ENV}"
    if not token:
        if settings.host not in LOOPBACK:
            raise TokenError(
                f"refusing to serve on {settings.host} without a token: anyone who reaches "
                f"that address could search the dataset. Put a token in a file and give "
                f"--token-file PATH, or set {TOKEN_ENV} (only a loopback bind, "
                f"{', '.join(LOOPBACK)}, runs without one)"
            )
        return None
    if len(token) < MIN_TOKEN_CHARS or not (token.isascii() and token.isprintable()):
        raise TokenError(
            f"the token in {where} must be at least {MIN_TOKEN_CHARS} printable ASCII "
            "characters (e.g. python -c 'import secrets; print(secrets.token_urlsafe())')"
        )
    if " " in token:
        raise TokenError(f"the token in {where} must not contain spaces")
    return token


def serve(index_uri: str, settings: ServiceSettings, reranker: str | None = None) -> int:
    """Serve the dataset over HTTP until interrupted (SIGINT or SIGTERM); with `reranker`, the
    folder of the cross-encoder that re-ranks (loaded, or refused with a RerankerError, before
    serving). While it serves, the dataset's service file names it (flows/service_client.py),
    so that a question on this machine comes here instead of loading everything itself."""
    try:
        token = service_token(settings)  # before anything loads: a refusal is immediate
    except TokenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import uvicorn

    from flows.service_client import announced
    from tasks.dataset.dataset import Dataset
    from tasks.embed.models import prefer_latency
    from tasks.search.searcher import Searcher

    searcher = Searcher(Dataset(index_uri, consistency=REFRESH), keep_vectors=True)
    if reranker:
        cross_encoder(reranker)  # load (or refuse) the cross-encoder before the first request
    searcher.embedder()  # likewise the model
    searcher.kept_chunks()  # and the vectors it ranks in memory
    prefer_latency()
    _log_to_stderr()
    reranking = f", re-ranking with {reranker}" if reranker else ""
    guarded = ", token required" if token else ""
    where = f"http://{settings.host}:{settings.port}"
    print(f"serving {index_uri} on {where}{reranking}{guarded} (MCP at {where}/mcp)", flush=True)
    app = create_app(searcher, settings, reranker, token)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level="warning")
    server = uvicorn.Server(config)
    listening = config.bind_socket()  # the port is ours before the service file names it
    # uvicorn shuts down gracefully on SIGTERM, then raises it again: as KeyboardInterrupt
    # (as SIGINT's), the service file is removed before the process ends.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with announced(index_uri, settings.host, settings.port, reranker, settings.search_timeout):
            server.run(sockets=[listening])
    except KeyboardInterrupt:
        pass
    return 0


def _log_to_stderr() -> None:
    """The service's log: refused and failed requests, with their details, on stderr."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
