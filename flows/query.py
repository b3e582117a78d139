"""Query flow: search the index for the chunks that answer a question.

    python -m flows.query "question" [--mode vector|fts|hybrid] [-k N] [filters] [--json]
    python -m flows.query --queries-file Q.jsonl [options]   one JSON line per query
    python -m flows.query --stats | --sources [--json]
    python -m flows.query --serve [--host 127.0.0.1] [--port 8765]

The question is embedded with the model recorded in the dataset. Modes: vector (score =
cosine similarity), fts (score = BM25 from LanceDB's full-text index) and hybrid (score =
reciprocal-rank fusion of both; the default once the dataset has a full-text index).
`--min-score` is a floor on cosine similarity in vector and hybrid mode, on BM25 in fts mode.
Filters combine: --source GLOB (`*` also crosses `/`; relative or absolute path), --type,
--section TEXT (heading path contains, any case), --since/--until (document modification
time: ISO date or date-time, UTC unless stated, or an age like 7d; --until is exclusive).
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import asdict, fields, replace
from datetime import datetime, timedelta

from prefect import flow, get_run_logger
from prefect.runtime import deployment
from pydantic import BaseModel, ConfigDict, model_validator

from tasks.search import (
    MODES,
    TYPES,
    Hit,
    Searcher,
    SearchParams,
    index_stats,
    list_sources,
    prefer_latency,
    read_queries,
    search_task,
    snippet,
)
from tasks.storage import local_path
from tasks.store import DEFAULT_INDEX_URI, DatasetError

SCORE_MEANING = {
    "vector": "cosine similarity",
    "fts": "BM25",
    "hybrid": "reciprocal-rank fusion of vector and full-text ranks",
}
DEFAULT_PORT = 8765
REFRESH = timedelta(seconds=1)  # how stale the service's view of the dataset may be


@flow(name="query")
def query(
    text: str,
    index_uri: str = DEFAULT_INDEX_URI,
    k: int = 5,
    source: str | None = None,
    mode: str | None = None,
    type: str | None = None,
    section: str | None = None,
    since: datetime | str | None = None,
    until: datetime | str | None = None,
    min_score: float | None = None,
    per_doc: bool = False,
    artifact: bool | None = None,
) -> list[Hit]:
    """The k best chunks for `text`; see SearchParams for the options.

    `artifact` publishes the hits as a table artifact; by default only deployment runs do.
    """
    params = SearchParams(
        k=k,
        mode=mode,
        source=source,
        type=type,
        section=section,
        since=since,
        until=until,
        min_score=min_score,
        per_doc=per_doc,
    )
    get_run_logger().info("query %r on %s with %s", text, index_uri, _describe(params))
    hits = search_task(index_uri, [text], params)[0]
    if artifact if artifact is not None else deployment.id is not None:
        _publish(text, index_uri, params, hits)
    return hits


@flow(name="query-batch")
def query_batch(
    texts: list[str], index_uri: str = DEFAULT_INDEX_URI, params: SearchParams | None = None
) -> list[list[Hit]]:
    """Hits for each text, with the model and tables loaded once."""
    params = params or SearchParams()
    get_run_logger().info("%d queries on %s with %s", len(texts), index_uri, _describe(params))
    return search_task(index_uri, texts, params)


def _describe(params: SearchParams) -> str:
    """The options that differ from the defaults, for the run log."""
    default = SearchParams()
    changed = {
        f.name: getattr(params, f.name)
        for f in fields(params)
        if getattr(params, f.name) != getattr(default, f.name)
    }
    return ", ".join(f"{name}={value!r}" for name, value in changed.items()) or "defaults"


def _publish(text: str, index_uri: str, params: SearchParams, hits: list[Hit]) -> None:
    """The hits as the `query-hits` table artifact; a failure to publish is only a warning."""
    from prefect.artifacts import create_table_artifact

    from tasks.report import publish_artifact

    rows = [
        {
            "rank": rank,
            "score": round(hit.score, 4),
            "source": hit.doc_id,
            "section": hit.section,
            "page": hit.page_number,
            "snippet": snippet(hit.text, text, width=200),
        }
        for rank, hit in enumerate(hits, start=1)
    ]
    publish_artifact(
        get_run_logger(),
        create_table_artifact,
        key="query-hits",
        table=rows,
        description=f"{len(hits)} hits for `{text}` in `{index_uri}` ({_describe(params)}).",
    )


def render_table(hits: list[Hit], text: str) -> str:
    """A readable listing: rank, score, source, page, section and a snippet around the match."""
    lines = []
    for rank, hit in enumerate(hits, start=1):
        page = f" p.{hit.page_number}" if hit.page_number is not None else ""
        lines.append(f"{rank:>2}. {hit.score:.4f}  {hit.doc_id}{page}")
        if hit.section:
            lines.append(f"    § {hit.section}")
        lines.extend(
            textwrap.wrap(
                snippet(hit.text, text), width=96, initial_indent="    ", subsequent_indent="    "
            )
        )
    return "\n".join(lines)


def render_stats(stats: dict) -> str:
    by_status = ", ".join(f"{n} {status}" for status, n in stats["documents_by_status"].items())
    indexes = "; ".join(
        f"{i['type']} on {', '.join(i['columns'])} ({i['unindexed_rows'] or 0} unindexed)"
        for i in stats["indexes"]
    )
    size_label = "size on disk" if local_path(stats["index"]) is not None else "size of live data"
    return "\n".join(
        [
            f"index: {stats['index']} (chunks table version {stats['table_version']})",
            f"chunks: {stats['chunks']}; documents: {stats['documents']} ({by_status or 'none'})",
            f"model: {stats['model']}",
            f"fingerprint: {json.dumps(stats['fingerprint'], ensure_ascii=False)}",
            f"run tags: {', '.join(stats['run_tags']) or 'none'}",
            f"indexes: {indexes or 'none'}; default mode: {stats['default_mode']}",
            f"{size_label}: {stats['size_bytes'] / 2**20:.1f} MiB",
        ]
    )


def render_sources(sources: list[dict]) -> str:
    lines = [f"{'status':<8} {'chunks':>6}  document"]
    for row in sources:
        error = f"  ({row['error']})" if row["error"] else ""
        lines.append(f"{row['status']:<8} {row['n_chunks']:>6}  {row['doc_id']}{error}")
    return "\n".join(lines)


class SearchRequest(BaseModel):
    """The body of POST /search: the question and the command line's search options."""

    model_config = ConfigDict(extra="forbid")

    text: str
    k: int = 5
    mode: str | None = None
    source: str | None = None
    type: str | None = None
    section: str | None = None
    since: str | None = None
    until: str | None = None
    min_score: float | None = None
    per_doc: bool = False

    def params(self) -> SearchParams:
        return SearchParams(**self.model_dump(exclude={"text"}))

    @model_validator(mode="after")
    def _valid(self) -> SearchRequest:
        if not self.text.strip():
            raise ValueError("text is empty")
        self.params()  # ValueError → 422 with its message
        return self


def create_app(searcher: Searcher):
    """The HTTP service: GET /health, POST /search, GET /stats on one open Searcher."""
    from fastapi import FastAPI, HTTPException

    app = FastAPI(title="doc-indexer search")

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok", "index": searcher.uri, "table_version": searcher.chunks.version}

    @app.post("/search")
    def search(request: SearchRequest) -> list[dict]:
        try:
            hits = searcher.search(request.text, request.params())
        except DatasetError as exc:
            raise HTTPException(status_code=409, detail=str(exc)) from None
        return [asdict(hit) for hit in hits]

    @app.get("/stats")
    def stats() -> dict:
        return index_stats(searcher)

    return app


def serve(index_uri: str, host: str, port: int) -> None:
    """Serve the dataset over HTTP until interrupted.

    What later ingest runs commit shows up within REFRESH (checking on every request costs
    2–3 ms a query here; once a second, well under 1 ms).
    """
    import uvicorn

    searcher = Searcher(index_uri, consistency=REFRESH)
    prefer_latency()
    searcher.embedder()  # load the model before the first request
    print(f"serving {index_uri} on http://{host}:{port}", flush=True)
    uvicorn.run(create_app(searcher), host=host, port=port, log_level="warning")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m flows.query",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("text", nargs="?", help="the question or search text")
    parser.add_argument(
        "--index", default=DEFAULT_INDEX_URI, help="LanceDB dataset URI (default: %(default)s)"
    )
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--queries-file", metavar="FILE", help='JSON Lines of {"qid", "query"}')
    what.add_argument("--stats", action="store_true", help="describe the dataset")
    what.add_argument("--sources", action="store_true", help="list the indexed documents")
    what.add_argument("--serve", action="store_true", help="run the HTTP search service")
    search = parser.add_argument_group("search options")
    search.add_argument("-k", type=int, default=5, help="number of hits (default: %(default)s)")
    search.add_argument("--mode", choices=MODES, help="default: hybrid if the index has FTS")
    search.add_argument("--source", metavar="GLOB", help="only documents whose path matches")
    search.add_argument("--type", choices=sorted(TYPES), help="only documents of this type")
    search.add_argument("--section", metavar="TEXT", help="only sections whose path contains")
    search.add_argument("--since", metavar="WHEN", help="documents modified at or after")
    search.add_argument("--until", metavar="WHEN", help="documents modified before")
    search.add_argument("--min-score", type=float, metavar="X", help="score floor (see above)")
    search.add_argument("--per-doc", action="store_true", help="best chunk per document only")
    search.add_argument("--model", help="refuse a dataset not built with this model")
    output = parser.add_argument_group("output")
    output.add_argument("--json", action="store_true", help="print JSON instead of a table")
    output.add_argument("--artifact", action="store_true", help="publish a Prefect artifact")
    service = parser.add_argument_group("service")
    service.add_argument("--host", default="127.0.0.1", help="address (default: %(default)s)")
    service.add_argument("--port", type=int, default=DEFAULT_PORT, help="default: %(default)s")
    args = parser.parse_args(argv)

    needs_text = not (args.queries_file or args.stats or args.sources or args.serve)
    if needs_text and not (args.text and args.text.strip()):
        parser.error("the search text is empty (or use --queries-file, --stats, --sources)")
    if not needs_text and args.text:
        parser.error("a search text cannot be combined with that option")
    try:
        args.params = SearchParams(**{f.name: getattr(args, f.name) for f in fields(SearchParams)})
    except ValueError as exc:
        # SearchParams messages start with the field name; say it as the option instead.
        name, _, rest = str(exc).partition(" ")
        parser.error(f"{'-k' if name == 'k' else '--' + name.replace('_', '-')} {rest}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.serve:
            serve(args.index, args.host, args.port)
            return 0
        searcher = Searcher(args.index)  # fail fast, before Prefect or the model start
        if args.stats:
            stats = index_stats(searcher)
            print(json.dumps(stats, indent=2) if args.json else render_stats(stats))
            return 0
        if args.sources:
            sources = list_sources(searcher)
            rendered = json.dumps(sources, indent=2, ensure_ascii=False)
            print(rendered if args.json else render_sources(sources))
            return 0
        if args.model:
            searcher.check_model(args.model)
        mode = searcher.resolve_mode(args.params.mode)
        if mode != "fts":
            searcher.embedder()  # load (or refuse) the model before the flow starts
        params = replace(args.params, mode=mode)
        if args.queries_file:
            return _run_batch(args.queries_file, args.index, params)
        hits = query(text=args.text, index_uri=args.index, artifact=args.artifact, **asdict(params))
    except DatasetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([asdict(hit) for hit in hits], ensure_ascii=False, indent=2))
    elif hits:
        print(f"{len(hits)} hits, mode {mode} (score: {SCORE_MEANING[mode]})")
        print(render_table(hits, args.text))
    else:
        print("no matching chunks")
    return 0


def _run_batch(path: str, index_uri: str, params: SearchParams) -> int:
    try:
        queries = read_queries(path)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    results = query_batch(texts=[q.query for q in queries], index_uri=index_uri, params=params)
    for batch_query, hits in zip(queries, results, strict=True):
        record = {"qid": batch_query.qid, "hits": [asdict(hit) for hit in hits]}
        print(json.dumps(record, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
