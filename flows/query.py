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
from dataclasses import asdict
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import deployment

from flows.cli import exit_status
from tasks.core.artifacts import publish_artifact
from tasks.core.options import Settings, add_options, flow_parameters, option, parse_options
from tasks.dataset.dataset import Dataset
from tasks.dataset.location import DatasetOption, local_path
from tasks.search.hits import Hit
from tasks.search.info import index_stats, list_sources
from tasks.search.params import SearchParams
from tasks.search.queries import read_queries
from tasks.search.request import Question
from tasks.search.searcher import Searcher
from tasks.search.snippet import snippet

SCORE_MEANING = {
    "vector": "cosine similarity",
    "fts": "BM25",
    "hybrid": "reciprocal-rank fusion of vector and full-text ranks",
}


class ArtifactOption(Settings):
    artifact: bool | None = option(
        None, "publish the hits as the query-hits table artifact (default: in deployment runs)"
    )


class QueryRequest(DatasetOption, SearchParams, Question, ArtifactOption):
    """The query flow's parameters: a question, its search options, the dataset."""


def search_texts(index_uri: str, texts: list[str], params: SearchParams) -> list[list[Hit]]:
    """Open the dataset and its model once, then search for every text."""
    return Searcher(Dataset(index_uri)).search_many(texts, params)


search_task = task(name="search", retries=1, cache_policy=NO_CACHE)(search_texts)


@flow(name="query")
@flow_parameters(QueryRequest)
def query(request: QueryRequest) -> list[Hit]:
    """The k best chunks for `text`.

    `artifact` publishes the hits as a table artifact; by default only deployment runs do.
    """
    params = request.narrow(SearchParams)
    get_run_logger().info(
        "query %r on %s with %s", request.text, request.index_uri, params.describe()
    )
    hits = search_task(request.index_uri, [request.text], params)[0]
    if request.artifact if request.artifact is not None else deployment.id is not None:
        _publish(request, params, hits)
    return hits


@flow(name="query-batch")
def query_batch(texts: list[str], index_uri: str, params: SearchParams) -> list[list[Hit]]:
    """Hits for each text, with the model and tables loaded once."""
    get_run_logger().info("%d queries on %s with %s", len(texts), index_uri, params.describe())
    return search_task(index_uri, texts, params)


def _publish(request: QueryRequest, params: SearchParams, hits: list[Hit]) -> None:
    """The hits as the `query-hits` table artifact; a failure to publish is only a warning."""
    from prefect.artifacts import create_table_artifact

    rows = [
        {
            "rank": rank,
            "score": round(hit.score, 4),
            "source": hit.doc_id,
            "section": hit.section,
            "page": hit.page_number,
            "snippet": snippet(hit.text, request.text, width=200),
        }
        for rank, hit in enumerate(hits, start=1)
    ]
    publish_artifact(
        get_run_logger(),
        create_table_artifact,
        key="query-hits",
        table=rows,
        description=f"{len(hits)} hits for `{request.text}` in `{request.index_uri}` "
        f"({params.describe()}).",
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


def render_stats(stats: dict[str, Any]) -> str:
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


def render_sources(sources: list[dict[str, Any]]) -> str:
    lines = [f"{'status':<8} {'chunks':>6}  document"]
    for row in sources:
        problem = f"  ({row['reason']}: {row['error']})" if row["reason"] else ""
        lines.append(f"{row['status']:<8} {row['n_chunks']:>6}  {row['doc_id']}{problem}")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    from flows.service import ServiceSettings

    parser = argparse.ArgumentParser(
        prog="python -m flows.query",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_options(parser, Question)
    add_options(parser, DatasetOption)
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--queries-file", metavar="FILE", help='JSON Lines of {"qid", "query"}')
    what.add_argument("--stats", action="store_true", help="describe the dataset")
    what.add_argument("--sources", action="store_true", help="list the indexed documents")
    what.add_argument("--serve", action="store_true", help="run the HTTP search service")
    add_options(parser.add_argument_group("search options"), SearchParams)
    parser.add_argument("--model", help="refuse a dataset not built with this model")
    output = parser.add_argument_group("output")
    output.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_options(output, ArtifactOption)
    add_options(parser.add_argument_group("service"), ServiceSettings)
    args = parser.parse_args(argv)
    needs_text = not (args.queries_file or args.stats or args.sources or args.serve)
    if not needs_text and args.text:
        parser.error("a search text cannot be combined with that option")
    if needs_text and args.text is None:
        parser.error("give the search text (or use --queries-file, --stats, --sources, --serve)")
    return parser, args


def main(argv: Sequence[str] | None = None) -> int:
    parser, args = parse_args(argv)
    dataset = parse_options(parser, args, DatasetOption)
    if args.serve:
        from flows.service import ServiceSettings, serve

        service = parse_options(parser, args, ServiceSettings)
        return exit_status(lambda: serve(dataset.index_uri, service))
    if args.stats or args.sources:
        return exit_status(lambda: _describe(dataset.index_uri, args.stats, args.json))
    params = parse_options(parser, args, SearchParams)
    if args.queries_file:
        return exit_status(lambda: _run_batch(args.queries_file, dataset.index_uri, params))
    request = parse_options(parser, args, QueryRequest)
    return exit_status(lambda: _ask(request, args.model, args.json))


def _describe(index_uri: str, stats: bool, as_json: bool) -> int:
    searcher = Searcher(Dataset(index_uri))
    if stats:
        found = index_stats(searcher)
        print(json.dumps(found, indent=2) if as_json else render_stats(found))
    else:
        sources = list_sources(searcher)
        print(
            json.dumps(sources, indent=2, ensure_ascii=False)
            if as_json
            else render_sources(sources)
        )
    return 0


def _ask(request: QueryRequest, model: str | None, as_json: bool) -> int:
    searcher = Searcher(Dataset(request.index_uri))  # fail fast, before Prefect or the model
    if model:
        searcher.check_model(model)
    mode = searcher.resolve_mode(request.mode)
    if mode != "fts":
        searcher.embedder()  # load (or refuse) the model before the flow starts
    hits = query(**request.model_copy(update={"mode": mode}).options())
    if as_json:
        print(json.dumps([asdict(hit) for hit in hits], ensure_ascii=False, indent=2))
    elif hits:
        print(f"{len(hits)} hits, mode {mode} (score: {SCORE_MEANING[mode]})")
        print(render_table(hits, request.text))
    else:
        print("no matching chunks")
    return 0


def _run_batch(path: str, index_uri: str, params: SearchParams) -> int:
    try:
        queries = read_queries(path)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    searcher = Searcher(Dataset(index_uri))
    params = params.model_copy(update={"mode": searcher.resolve_mode(params.mode)})
    if params.mode != "fts":
        searcher.embedder()
    results = query_batch(texts=[q.query for q in queries], index_uri=index_uri, params=params)
    for batch_query, hits in zip(queries, results, strict=True):
        record = {"qid": batch_query.qid, "hits": [asdict(hit) for hit in hits]}
        print(json.dumps(record, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
