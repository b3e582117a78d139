"""Restore flow: put the index back to the state a past ingest run left it in.

    python -m flows.restore TAG [--index URI]
    python -m flows.restore --list [--index URI]

Every ingest run tags the versions it produced (`run-<UTC timestamp>`, named in its summary);
the newest 10 are kept. Restoring commits those versions again as the current ones, for both
the chunks table and the documents ledger, so the next ingest run picks up from there.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from prefect import flow, get_run_logger

from tasks.store import DEFAULT_INDEX_URI, DatasetError, restore_dataset, run_tags


@flow(name="restore")
def restore(tag: str, index_uri: str = DEFAULT_INDEX_URI) -> int:
    """Make the tagged versions current; returns the new chunks table version."""
    version = restore_dataset(index_uri, tag)
    get_run_logger().info("restored %s to %s (chunks table version %d)", index_uri, tag, version)
    return version


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m flows.restore", description=__doc__.split("\n")[0]
    )
    parser.add_argument("tag", nargs="?", help="run tag to restore (see --list)")
    parser.add_argument(
        "--index", default=DEFAULT_INDEX_URI, help="LanceDB dataset URI (default: %(default)s)"
    )
    parser.add_argument("--list", action="store_true", help="list the run tags and their versions")
    args = parser.parse_args(argv)
    if not args.list and not args.tag:
        parser.error("give a TAG to restore, or --list")
    try:
        tags = run_tags(args.index)
        if args.list:
            for name, version in tags.items():
                print(f"{name}  chunks table version {version}")
            return 0
        if args.tag not in tags:
            raise DatasetError(f"no tag {args.tag!r} in {args.index}; see --list")
    except DatasetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    version = restore(tag=args.tag, index_uri=args.index)
    print(f"restored {args.index} to {args.tag} (chunks table version {version})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
