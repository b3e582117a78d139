"""A question asked of the search service that serves its dataset on this machine.

A `python -m flows.query --serve` process says where it listens in a small JSON file beside
its dataset's lock (`tasks.dataset.location.service_file`): its pid, host and port, the
dataset it serves, its cross-encoder and its search time limit. It writes the file once its
port is bound and removes it when it stops (`announced`); a killed one leaves it behind.

`answer` sends a question there (GET /health, then POST /search) and returns its hits, or
None whenever the service cannot give what this process would: no file, a file of another
dataset (a copied folder), a process that is gone, a refused connection, a question with a
cross-encoder other than the service's, any answer but hits (a 401 of a service that needs a
token this process does not have, among them). The caller then searches itself, the cold way.
The announcement never holds a service's token: a question sends the one in
$DOC_INDEXER_TOKEN (TOKEN_ENV), if set, as `Authorization: Bearer`. Only the standard library
is imported here: a question answered by the service loads neither LanceDB nor the model nor
an HTTP client library.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tasks.dataset.location import local_path, service_file
from tasks.search.hits import Hit
from tasks.search.params import Mode, SearchOptions
from tasks.search.request import QueryRequest

# Seconds to connect and read /health: a local service that takes longer is not well enough
# to be worth the wait (the question is then answered here).
CONNECT_TIMEOUT = 2.0
# Seconds a search may take beyond the service's own time limit (it answers 503 by then).
SEARCH_SLACK = 5.0
# The environment variable of the service's bearer token: flows/service.py reads it where no
# --token-file names one (a command-line value would show in `ps`), a question sends it.
TOKEN_ENV = "DOC_INDEXER_TOKEN"


@dataclass(frozen=True)
class Announcement:
    """What a service's file says: who serves which dataset where."""

    pid: int
    host: str
    port: int
    index: str  # the dataset URI the service was started with
    reranker: str | None  # the folder of its cross-encoder, resolved
    search_timeout: float


@contextmanager
def announced(
    index_uri: str, host: str, port: int, reranker: str | None, search_timeout: float
) -> Iterator[None]:
    """The dataset's service file names this process while the block runs (the service's
    port already bound); removed after it unless a later service has replaced it. Where the
    file cannot be written (a read-only folder), the service runs unannounced."""
    path = service_file(index_uri)
    folder = None if reranker is None else str(Path(reranker).expanduser().resolve())
    own = Announcement(os.getpid(), host, port, index_uri, folder, search_timeout)
    written = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        written.write_text(json.dumps(asdict(own)), "utf-8")
        os.replace(written, path)  # a reader sees the whole file or none
    except OSError as exc:
        print(f"warning: questions will not find this service: {exc}", file=sys.stderr)
        with suppress(OSError):
            written.unlink(missing_ok=True)
        yield
        return
    try:
        yield
    finally:
        if read_announcement(path) == own:
            path.unlink(missing_ok=True)


def read_announcement(path: Path) -> Announcement | None:
    """The announcement in `path`; None when there is none or it cannot be read."""
    try:
        found = Announcement(**json.loads(path.read_text("utf-8")))
    except (OSError, ValueError, TypeError):
        return None
    fields = (found.pid, found.port, found.host, found.index, found.search_timeout)
    kinds = (int, int, str, str, int | float)
    return found if all(map(isinstance, fields, kinds)) else None


def running_service(index_uri: str) -> Announcement | None:
    """The announcement of a service of the dataset at `index_uri` whose process still runs."""
    found = read_announcement(service_file(index_uri))
    if found is None or not _same_dataset(found.index, index_uri) or not _alive(found.pid):
        return None
    return found


def answer(request: QueryRequest) -> tuple[Mode, list[Hit]] | None:
    """The mode and hits that the dataset's running service gives for `request`, as a search
    in this process would give them; None when there is no service that can."""
    service = running_service(request.index_uri)
    if service is None:
        return None
    body = _search_body(request, service)
    if body is None:
        return None
    connection = http.client.HTTPConnection(
        _reachable(service.host), service.port, timeout=CONNECT_TIMEOUT
    )
    try:
        health = _exchange(connection, "GET", "/health")
        if not isinstance(health, dict) or not _same_dataset(health.get("index"), service.index):
            return None
        mode = request.mode or health["default_mode"]
        connection.timeout = service.search_timeout + SEARCH_SLACK
        if connection.sock is not None:  # kept open after /health
            connection.sock.settimeout(connection.timeout)
        hits = _exchange(connection, "POST", "/search", body | {"mode": mode})
        if not isinstance(hits, list):
            return None
        return mode, [Hit(**hit) for hit in hits]
    except (OSError, http.client.HTTPException, ValueError, TypeError, KeyError):
        return None
    finally:
        connection.close()


def _search_body(request: QueryRequest, service: Announcement) -> dict[str, Any] | None:
    """The POST /search body for `request`; None when the service cannot re-rank as asked."""
    if request.rerank is None:
        rerank = False  # a service started with --rerank re-ranks unless told not to
    elif service.reranker == str(Path(request.rerank).expanduser().resolve()):
        rerank = True
    else:
        return None
    options = request.model_dump(mode="json", include=set(SearchOptions.model_fields))
    return {"text": request.text, **options, "rerank": rerank}


def _exchange(
    connection: http.client.HTTPConnection, method: str, path: str, body: Any = None
) -> Any:
    """The JSON of a 200 answer to one request; None for any other status."""
    payload = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} if payload is not None else {}
    token = os.environ.get(TOKEN_ENV, "").strip()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    connection.request(method, path, body=payload, headers=headers)
    response = connection.getresponse()
    content = response.read()
    return json.loads(content) if response.status == 200 else None


def _same_dataset(announced_uri: object, uri: str) -> bool:
    if not isinstance(announced_uri, str):
        return False
    here, there = local_path(uri), local_path(announced_uri)
    if here is None or there is None:
        return announced_uri.rstrip("/") == uri.rstrip("/")
    return here.resolve() == there.resolve()


def _alive(pid: int) -> bool:
    if pid <= 0:  # os.kill would signal a process group
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _reachable(host: str) -> str:
    """Where this machine reaches a service bound to `host` (every address: the loopback)."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
