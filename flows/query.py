# Over 300 lines: the query command's options, outputs and its three paths (service, here, flow).
"""Query: search the index for the chunks that answer a question.

    python -m flows.query "question" [--mode vector|fts|hybrid] [-k N] [filters]
                          [--context N | --expand section] [--json | --format markdown]
                          [--no-service]
    python -m flows.query --queries-file Q.jsonl [options]   one JSON line per query
    python -m flows.query --stats | --sources [--json]
    python -m flows.query --serve [--rerank PATH] [--host 127.0.0.1] [--port 8765] [limits]

The question is embedded with the model recorded in the dataset. Modes: vector (score =
cosine similarity), fts (score = BM25 from LanceDB's full-text index on the analysed text)
and hybrid (score = both fused by their standardised scores, tasks/search/fusion.py; the
default once the dataset has a full-text index). `--rerank PATH` re-scores the mode's best
candidates (`--rerank-depth`, 50) with the sentence-transformers cross-encoder in folder
PATH (score = its relevance score).
`--min-score` is a floor on cosine similarity in vector and hybrid mode, on BM25 in fts
mode, on the cross-encoder's score with --rerank. Filters combine: --source GLOB (`*` also
crosses `/`; relative or absolute path), --type, --section TEXT (heading path contains, any
case), --since/--until (document modification time: ISO date or date-time, UTC unless
stated, or an age like 7d; --until is exclusive). --context N gives each hit the text of N
neighbouring chunks on each side, --expand section that of its whole section (both in the
JSON hits as `context`, with the hit's range in it, `context_start` and `context_end`).
--format markdown prints the hits (or their context) as numbered quotes with their source,
section and page, ready to paste into a prompt. --serve answers POST /search over HTTP
(flows/service.py); of the search options it takes only --rerank, the one cross-encoder its
requests may switch on or off, and its limits are the service options.

A question that finds such a service of its dataset running on this machine is sent to it
(flows/service_client.py): the same hits and output, without loading LanceDB or the model
here. It goes there only when the service can answer it as this process would (its
cross-encoder, if any, is the one --rerank names; within its limits; no --model check) and
when it is not recorded (below); anything else, a service that is gone or does not answer,
and --no-service search in this process.

What is recorded: with a Prefect API configured (PREFECT_API_URL wherever Prefect reads it:
the environment, .env, prefect.toml, a Prefect profile), a question or a --queries-file is a
run of the `query` (or `query-batch`) flow on that server, visible in the UI. Without one,
the search runs in this process and nothing is recorded; --record (or --artifact) makes it a
flow run anyway, on a temporary Prefect server (flows/temporary_server.py). A recorded
question is answered in this process, never by a running service. --stats, --sources and
--serve are never flow runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from flows import service_client, temporary_server
from flows.cli import exit_process, exit_status
from flows.prefect_settings import configured_api_url
from flows.render import render_markdown
from flows.service import ServiceSettings
from tasks.core.options import add_options, flag, option_fields, parse_options
from tasks.dataset.location import DatasetOption, local_path
from tasks.search.hits import Hit
from tasks.search.params import SearchParams
from tasks.search.queries import read_queries
from tasks.search.request import ArtifactOption, QueryRequest, Question
from tasks.search.rerank import cross_encoder
from tasks.search.snippet import snippet

# LanceDB, numpy and the models (tasks.dataset.dataset, tasks.search.searcher and
# tasks.search.info) are imported in the functions that open the dataset: --help, option
# errors and a question a running service answers never load them (README, "Everyday paths").

# How hits are printed: a table, JSON (also `--json`) or Markdown quotes with citations.
FORMATS = ("table", "json", "markdown")
SCORE_MEANING = {
    "vector": "cosine similarity",
    "fts": "BM25",
    "hybrid": "fusion of standardised vector and full-text scores",
}


def render_table(hits: list[Hit], text: str) -> str:
    """A readable listing: rank, score, in hybrid mode the list(s) that found the hit
    (vector, text or both), source, page, section and a snippet around the match."""
    lines = []
    for rank, hit in enumerate(hits, start=1):
        page = f" p.{hit.page_number}" if hit.page_number is not None else ""
        found = f"{hit.found_by:<6}  " if hit.found_by else ""
        lines.append(f"{rank:>2}. {hit.score:.4f}  {found}{hit.doc_id}{page}")
        if hit.section:
            lines.append(f"    § {hit.section}")
        shown = snippet(hit.text, text) if hit.context is None else marked_context(hit)
        lines.extend(
            textwrap.wrap(shown, width=96, initial_indent="    ", subsequent_indent="    ")
        )
    return "\n".join(lines)


def marked_context(hit: Hit) -> str:
    """The hit's context on one line, the hit's own text between » and «."""
    assert hit.context is not None
    start, end = hit.context_start, hit.context_end
    marked = f"{hit.context[:start]}»{hit.context[start:end]}«{hit.context[end:]}"
    return " ".join(marked.split())


def render_stats(stats: dict[str, Any]) -> str:
    by_status = ", ".join(f"{n} {status}" for status, n in stats["documents_by_status"].items())
    indexes = "; ".join(
        f"{i['type']} on {', '.join(i['columns'])} ({i['unindexed_rows'] or 0} unindexed)"
        for i in stats["indexes"]
    )
    size_label = "size on disk" if local_path(stats["index"]) is not None else "size of live data"
    languages = ", ".join(f"{group} {share:.0%}" for group, share in stats["languages"].items())
    if stats["languages_sampled_chunks"] < stats["chunks"]:
        languages += f" (from a sample of {stats['languages_sampled_chunks']} chunks)"
    return "\n".join(
        [
            f"index: {stats['index']} (chunks table version {stats['table_version']})",
            f"chunks: {stats['chunks']}; documents: {stats['documents']} ({by_status or 'none'})",
            f"model: {stats['model']}",
            f"fingerprint: {json.dumps(stats['fingerprint'], ensure_ascii=False)}",
            f"run tags: {', '.join(stats['run_tags']) or 'none'}",
            f"indexes: {indexes or 'none'}; default mode: {stats['default_mode']}",
            f"languages: {languages or 'none'}",
            f"{size_label}: {stats['size_bytes'] / 2**20:.1f} MiB",
        ]
    )


def render_sources(sources: list[dict[str, Any]]) -> str:
    lines = [f"{'status':<8} {'chunks':>6}  document"]
    for row in sources:
        notes = [f"{row['reason']}: {row['error']}" if row["reason"] else row["error"]]
        if row["ocr_pages"]:
            notes.append(f"OCR: page {', '.join(map(str, row['ocr_pages']))}")
        problem = "".join(f"  ({note})" for note in notes if note)
        lines.append(f"{row['status']:<8} {row['n_chunks']:>6}  {row['doc_id']}{problem}")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
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
    output.add_argument(
        "--format",
        choices=FORMATS,
        help="print the hits as a table, JSON (as --json) or Markdown quotes with citations "
        "(default: table)",
    )
    add_options(output, ArtifactOption)
    output.add_argument(
        "--record",
        action="store_true",
        help="record a Prefect flow run even when no Prefect API is configured",
    )
    parser.add_argument(
        "--no-service",
        action="store_true",
        help="search in this process even when a --serve process serves the dataset here",
    )
    add_options(parser.add_argument_group("service"), ServiceSettings)
    args = parser.parse_args(argv)
    needs_text = not (args.queries_file or args.stats or args.sources or args.serve)
    if not needs_text and args.text:
        parser.error("a search text cannot be combined with that option")
    if needs_text and args.text is None:
        parser.error("give the search text (or use --queries-file, --stats, --sources, --serve)")
    per_request = [
        flag(SearchParams, name)
        for name in option_fields(SearchParams)
        if name != "rerank" and getattr(args, name) is not None
    ]
    if args.serve and per_request:
        parser.error(f"--serve takes no {', '.join(per_request)}: each request sets its own")
    if args.json and args.format not in (None, "json"):
        parser.error(f"--json and --format {args.format} cannot be combined")
    args.format = "json" if args.json else args.format or "table"
    if args.format == "markdown" and not needs_text:
        parser.error("--format markdown prints the hits of one question")
    return parser, args


def main(argv: Sequence[str] | None = None) -> int:
    parser, args = parse_args(argv)
    dataset = parse_options(parser, args, DatasetOption)
    if args.serve:
        from flows.service import ServiceSettings, serve

        service = parse_options(parser, args, ServiceSettings)
        reranker = parse_options(parser, args, SearchParams).rerank
        return exit_status(lambda: serve(dataset.index_uri, service, reranker))
    if args.stats or args.sources:
        as_json = args.format == "json"
        return exit_status(lambda: _describe(dataset.index_uri, args.stats, as_json))
    record = bool(args.record or args.artifact or configured_api_url())
    # Without an API server, Prefect's temporary server starts while the model loads.
    server = temporary_server.start() if record else None
    if args.queries_file:
        params = parse_options(parser, args, SearchParams)
        return exit_status(
            lambda: _run_batch(args.queries_file, dataset.index_uri, params, record, server)
        )
    request = parse_options(parser, args, QueryRequest)
    if not (record or args.no_service or args.model):
        answered = service_client.answer(request)  # None: no service here that can answer
        if answered is not None:
            mode, hits = answered
            return _print_hits(hits, request, mode, args.format)
    return exit_status(lambda: _ask(request, args.model, args.format, record, server))


def _describe(index_uri: str, stats: bool, as_json: bool) -> int:
    from tasks.dataset.dataset import Dataset
    from tasks.search.info import index_stats, list_sources
    from tasks.search.searcher import Searcher

    searcher = Searcher(Dataset(index_uri))
    if stats:
        found = index_stats(searcher)
        print(json.dumps(found, indent=2) if as_json else render_stats(found))
    else:
        sources = list_sources(searcher)
        rendered = json.dumps(sources, indent=2, ensure_ascii=False)
        print(rendered if as_json else render_sources(sources))
    return 0


def _ask(
    request: QueryRequest,
    model: str | None,
    output: str,
    record: bool,
    server: temporary_server.TemporaryServer | None,
) -> int:
    from tasks.dataset.dataset import Dataset
    from tasks.search.searcher import Searcher

    searcher = Searcher(Dataset(request.index_uri))  # fail fast, before Prefect or the model
    if model:
        searcher.check_model(model)
    mode = searcher.resolve_mode(request.mode)
    request = request.model_copy(update={"mode": mode})
    if mode != "fts":
        searcher.embedder()  # load (or refuse) the model before a flow run starts
    if request.rerank:
        cross_encoder(request.rerank)  # likewise the cross-encoder
    if record:
        from flows.query_flow import query

        if server is not None:
            server.wait_until_ready()
        hits = query(**request.options())
    else:
        hits = searcher.search(request.text, request.narrow(SearchParams))
    return _print_hits(hits, request, mode, output)


def _print_hits(hits: list[Hit], request: QueryRequest, mode: str, output: str) -> int:
    if output == "json":
        print(json.dumps([asdict(hit) for hit in hits], ensure_ascii=False, indent=2))
    elif output == "markdown" and hits:
        print(render_markdown(hits))
    elif hits:
        meaning = f"cross-encoder, {mode} candidates" if request.rerank else SCORE_MEANING[mode]
        header = f"{len(hits)} hits, mode {mode} (score: {meaning})"
        if mode == "hybrid":
            header += "; after the score, the list that found the hit: vector, text or both"
        print(header)
        print(render_table(hits, request.text))
    else:
        print("no matching chunks")
    return 0


def _run_batch(
    path: str,
    index_uri: str,
    params: SearchParams,
    record: bool,
    server: temporary_server.TemporaryServer | None,
) -> int:
    try:
        queries = read_queries(path)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    from tasks.dataset.dataset import Dataset
    from tasks.search.searcher import Searcher

    searcher = Searcher(Dataset(index_uri), keep_vectors=True)  # many questions
    params = params.model_copy(update={"mode": searcher.resolve_mode(params.mode)})
    texts = [q.query for q in queries]
    if record:
        from flows.query_flow import query_batch

        if params.mode != "fts":
            searcher.embedder()
        if params.rerank:
            cross_encoder(params.rerank)
        if server is not None:
            server.wait_until_ready()
        results = query_batch(texts=texts, index_uri=index_uri, params=params)
    else:
        results = searcher.search_many(texts, params)
    for batch_query, hits in zip(queries, results, strict=True):
        record_line = {"qid": batch_query.qid, "hits": [asdict(hit) for hit in hits]}
        print(json.dumps(record_line, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    exit_process(main())
