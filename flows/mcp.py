"""The dataset's MCP server on stdio, as desktop agents launch it.

    python -m flows.mcp [--index URI]

Tools search, read, sources and stats and the prompt answer_with_sources
(flows/mcp_server.py). A search runs as in `python -m flows.query --serve`, with the
service's default limits (k, question length, time limit: `flows.query --help`), and the
other tools within the same time limit; no rate limit (the one client is the agent that
started this process). The model and the dataset's vectors load once, at start. stdout
carries the protocol only: the log and anything a library prints go to stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from flows.cli import exit_process, exit_status
from tasks.core.options import add_options, parse_options
from tasks.dataset.location import DatasetOption


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m flows.mcp",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_options(parser, DatasetOption)
    args = parser.parse_args(argv)
    dataset = parse_options(parser, args, DatasetOption)
    return exit_status(lambda: serve_stdio(dataset.index_uri))


def serve_stdio(index_uri: str) -> int:
    """Serve the dataset's MCP server on stdin and stdout until the client closes them."""
    import logging

    import anyio
    from mcp.server.stdio import stdio_server

    from flows.service import REFRESH, Searches, ServiceSettings, mcp_server
    from tasks.dataset.dataset import Dataset
    from tasks.search.searcher import Searcher

    searcher = Searcher(Dataset(index_uri, consistency=REFRESH), keep_vectors=True)
    searcher.embedder()  # load (or refuse) the model before the client's first call
    searches = Searches(searcher, ServiceSettings())
    server = mcp_server(searches)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("flows").setLevel(logging.INFO)

    async def run() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    try:
        anyio.run(run)
    except KeyboardInterrupt:
        pass
    finally:
        searches.close()
    return 0


if __name__ == "__main__":
    exit_process(main())
