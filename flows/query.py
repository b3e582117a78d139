"""Query flow: search the index for the chunks that answer a question.

    python -m flows.query "question" [--index URI] [-k N] [--source GLOB] [--json]

The question is embedded with the model recorded in the dataset. `--source` is a glob
(`*` also crosses `/`) matched against the document path relative to the indexed folder or
against its absolute path. `--json` prints one JSON array of hits.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import asdict

from prefect import flow, get_run_logger

from tasks.search import Hit, search_task
from tasks.store import DEFAULT_INDEX_URI, DatasetError, read_fingerprint


@flow(name="query")
def query(
    text: str, index_uri: str = DEFAULT_INDEX_URI, k: int = 5, source: str | None = None
) -> list[Hit]:
    """The k chunks most similar to `text`."""
    get_run_logger().info("query %r (k=%d, source=%r, index=%s)", text, k, source, index_uri)
    return search_task(index_uri, text, k, source)


def render_table(hits: list[Hit]) -> str:
    """A readable listing: rank, score, source, section, page and a snippet."""
    lines = []
    for rank, hit in enumerate(hits, start=1):
        page = f" p.{hit.page_number}" if hit.page_number is not None else ""
        lines.append(f"{rank:>2}. {hit.score:.3f}  {hit.doc_id}{page}")
        if hit.section:
            lines.append(f"    § {hit.section}")
        snippet = textwrap.shorten(" ".join(hit.text.split()), width=300, placeholder=" …")
        lines.extend(
            textwrap.wrap(snippet, width=96, initial_indent="    ", subsequent_indent="    ")
        )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m flows.query", description=__doc__.split("\n")[0]
    )
    parser.add_argument("text", help="the question or search text")
    parser.add_argument(
        "--index", default=DEFAULT_INDEX_URI, help="LanceDB dataset URI (default: %(default)s)"
    )
    parser.add_argument("-k", type=int, default=5, help="number of hits (default: %(default)s)")
    parser.add_argument(
        "--source", default=None, metavar="GLOB", help="only documents whose path matches"
    )
    parser.add_argument("--json", action="store_true", help="print a JSON array of hits")
    args = parser.parse_args(argv)
    if args.k < 1:
        parser.error("-k must be at least 1")
    if not args.text.strip():
        parser.error("the search text is empty")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        read_fingerprint(args.index)  # fail fast, before Prefect or the model start
    except DatasetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    hits = query(text=args.text, index_uri=args.index, k=args.k, source=args.source)
    if args.json:
        print(json.dumps([asdict(hit) for hit in hits], ensure_ascii=False, indent=2))
    elif hits:
        print(render_table(hits))
    else:
        print("no matching chunks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
