"""The search service: one open dataset and model, answering over HTTP.

    python -m flows.query --serve [--index URI] [--host 127.0.0.1] [--port 8765]

GET /health, POST /search (a question and the command line's search options as JSON; the
hits as the command line's --json prints them; invalid input, a "rerank" folder without a
usable cross-encoder included, is a 422 with a message), GET /stats. What later ingest runs
commit shows up within REFRESH.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import timedelta
from typing import Any

from tasks.core.options import Settings, option
from tasks.dataset.dataset import Dataset
from tasks.dataset.location import DatasetError
from tasks.embed.models import prefer_latency
from tasks.search.info import index_stats
from tasks.search.request import SearchRequest
from tasks.search.rerank import RerankerError
from tasks.search.searcher import Searcher

# How stale the service's view of the dataset may be: checking for new versions on every
# request costs a few milliseconds a query, once a second well under one.
REFRESH = timedelta(seconds=1)


class ServiceSettings(Settings):
    """Where the service listens."""

    host: str = option("127.0.0.1", "address to bind (this machine only, unless told otherwise)")
    port: int = option(8765, "port", ge=1, le=65535)


def create_app(searcher: Searcher) -> Any:
    """The HTTP service: GET /health, POST /search, GET /stats on one open Searcher."""
    from fastapi import FastAPI, HTTPException

    app = FastAPI(title="doc-indexer search")

    @app.get("/health")
    def health() -> dict[str, Any]:
        dataset = searcher.dataset
        return {"status": "ok", "index": dataset.uri, "table_version": dataset.chunks.version}

    @app.post("/search")
    def search(request: SearchRequest) -> list[dict[str, Any]]:
        try:
            hits = searcher.search(request.text, request.params())
        except RerankerError as exc:  # the request named a folder that cannot rerank
            raise HTTPException(status_code=422, detail=str(exc)) from None
        except DatasetError as exc:
            raise HTTPException(status_code=409, detail=str(exc)) from None
        return [asdict(hit) for hit in hits]

    @app.get("/stats")
    def stats() -> dict[str, Any]:
        return index_stats(searcher)

    return app


def serve(index_uri: str, settings: ServiceSettings) -> int:
    """Serve the dataset over HTTP until interrupted."""
    import uvicorn

    searcher = Searcher(Dataset(index_uri, consistency=REFRESH))
    searcher.embedder()  # load the model before the first request
    prefer_latency()
    print(f"serving {index_uri} on http://{settings.host}:{settings.port}", flush=True)
    uvicorn.run(create_app(searcher), host=settings.host, port=settings.port, log_level="warning")
    return 0
