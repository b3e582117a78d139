"""Serve the `ingest` flow as a scheduled Prefect deployment that never overlaps itself.

    python -m deployments.serve [--source DIR] [--index URI] [--cron "0 * * * *"] [--name NAME]

Registers the deployment `ingest/<name>` with the Prefect API in PREFECT_API_URL (a local
`prefect server start`, see deployments/README.md), with a cron schedule and the source folder
and dataset URI as its parameters, then keeps running: it picks up scheduled and manually
triggered runs and executes each one in a subprocess. Stop it with Ctrl-C (this pauses the
schedule).

Why a deployment concurrency limit of 1 with the ENQUEUE strategy: two ingest runs writing the
same LanceDB dataset at once would both diff against the same ledger and race on the same
documents. With the limit, the API hands out one slot; a run that comes due (or is triggered)
while another holds it is not started but put back in the Scheduled state named
`AwaitingConcurrencySlot` (visible in the UI) and retried until the slot is free.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy

from flows.ingest import ingest
from tasks.dataset.location import DEFAULT_INDEX_URI

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = ROOT / "data" / "sample"
DEFAULT_CRON = "0 * * * *"  # hourly, on the hour
DEFAULT_NAME = "reindex"

# One run at a time per deployment; a colliding run waits for the slot instead of being
# cancelled (ConcurrencyLimitStrategy.CANCEL_NEW would drop it).
ONE_AT_A_TIME = ConcurrencyLimitConfig(limit=1, collision_strategy=ConcurrencyLimitStrategy.ENQUEUE)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m deployments.serve", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--source", default=str(DEFAULT_SOURCE), help="folder to index (default: %(default)s)"
    )
    parser.add_argument(
        "--index", default=DEFAULT_INDEX_URI, help="LanceDB dataset URI (default: %(default)s)"
    )
    parser.add_argument(
        "--cron", default=DEFAULT_CRON, help="cron schedule, UTC (default: %(default)r)"
    )
    parser.add_argument(
        "--name", default=DEFAULT_NAME, help="deployment name (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    if not Path(args.source).is_dir():
        parser.error(f"source folder not found: {args.source}")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    # Absolute paths: runs execute in a subprocess and must not depend on its working directory.
    index_uri = args.index if "://" in args.index else str(Path(args.index).resolve())
    ingest.serve(
        name=args.name,
        cron=args.cron,
        parameters={"source_dir": str(Path(args.source).resolve()), "index_uri": index_uri},
        global_limit=ONE_AT_A_TIME,
        description=f"Re-index {args.source} into {index_uri} ({args.cron}), one run at a time.",
        tags=["doc-indexer"],
    )


if __name__ == "__main__":
    main()
