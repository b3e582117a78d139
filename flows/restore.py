"""Restore flow: put the index back to the state a past ingest run left it in.

    python -m flows.restore TAG [--index URI] [--lock-timeout SECONDS]
    python -m flows.restore --list [--index URI]

Every ingest run that changed the dataset tags the versions it produced (`run-<UTC
timestamp>`, named in its summary); the newest 10 are kept. Restoring commits those versions
again as the current ones, for both the chunks table and the documents ledger, so the next
ingest run picks up from there. A restore holds the dataset's lock, as an ingest run does.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from prefect import flow, get_run_logger

from flows.cli import exit_process, exit_status
from tasks.core.options import add_options, flow_parameters, parse_options, positional
from tasks.core.prefect_compat import prompt_heartbeats
from tasks.dataset.dataset import Dataset
from tasks.dataset.location import DatasetError, DatasetOption
from tasks.dataset.lock import LockOption

prompt_heartbeats()  # a flow run returns when its work is done, not up to 1 s later


class RestoreRequest(LockOption, DatasetOption):
    tag: str = positional("the run tag to restore (see --list)")


@flow(name="restore")
@flow_parameters(RestoreRequest)
def restore(request: RestoreRequest) -> int:
    """Make the tagged versions current; returns the new chunks table version."""
    dataset = Dataset(request.index_uri)
    with dataset.lock(request.lock_timeout, get_run_logger()):  # runs writing it wait
        version = dataset.restore(request.tag)
    get_run_logger().info(
        "restored %s to %s (chunks table version %d)", request.index_uri, request.tag, version
    )
    return version


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m flows.restore", description=(__doc__ or "").split("\n")[0]
    )
    add_options(parser, RestoreRequest)
    parser.add_argument("--list", action="store_true", help="list the run tags and their versions")
    args = parser.parse_args(argv)
    if not args.list and not args.tag:
        parser.error("give a TAG to restore, or --list")
    index_uri = parse_options(parser, args, DatasetOption).index_uri
    lock_timeout = parse_options(parser, args, LockOption).lock_timeout

    def run() -> int:
        tags = Dataset(index_uri).run_tags()
        if args.list:
            for name, version in tags.items():
                print(f"{name}  chunks table version {version}")
            return 0
        if args.tag not in tags:
            raise DatasetError(f"no tag {args.tag!r} in {index_uri}; see --list")
        version = restore(tag=args.tag, index_uri=index_uri, lock_timeout=lock_timeout)
        print(f"restored {index_uri} to {args.tag} (chunks table version {version})")
        return 0

    return exit_status(run)


if __name__ == "__main__":
    exit_process(main())
