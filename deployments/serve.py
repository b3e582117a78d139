"""Serve the `ingest` flow on a schedule, and the `query` flow for the Prefect UI.

    python -m deployments.serve [--source DIR] [--index URI] [--cron "0 * * * *"] [--name NAME]

Registers three deployments with the Prefect API in PREFECT_API_URL (a local `prefect server
start`, see deployments/README.md), then keeps running: it picks up their scheduled and
triggered runs and executes each one in a subprocess. Stop it with Ctrl-C (this pauses the
schedule).

- `ingest/<name>` re-indexes the source folder into the dataset on the cron schedule; its
  parameters are the ingest options (tasks/ingest/settings.py), with the source folder and
  dataset set.
- `query/<name>` runs a search from the deployment's parameter form (the question and the
  search options, tasks/search/request.py) on the same dataset; its hits show as the
  `query-hits` table artifact of the run.
- `audit/<name>` checks the dataset against the source folder on demand (flows/audit.py; with
  the `repair` parameter it fixes what it finds); its findings show as the `audit-report`
  table artifact, and a run that found problems ends Failed.

Why a concurrency limit of 1 with the ENQUEUE strategy on `ingest`: two ingest runs writing
the same LanceDB dataset at once would both diff against the same ledger and race on the
same documents. With the limit, the API hands out one slot; a run that comes due (or is
triggered) while another holds it is not started but put back in the Scheduled state named
`AwaitingConcurrencySlot` (visible in the UI) and retried until the slot is free. Queries
only read, so they have no limit.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import cast

from prefect import serve
from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
from prefect.deployments.runner import RunnerDeployment

from flows.audit import audit_index
from flows.ingest import ingest
from flows.query_flow import query
from tasks.dataset.location import DEFAULT_INDEX_URI, local_path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = ROOT / "data" / "sample"
DEFAULT_CRON = "0 * * * *"  # hourly, on the hour
DEFAULT_NAME = "reindex"

# One run at a time per deployment; a colliding run waits for the slot instead of being
# cancelled (ConcurrencyLimitStrategy.CANCEL_NEW would drop it).
ONE_AT_A_TIME = ConcurrencyLimitConfig(limit=1, collision_strategy=ConcurrencyLimitStrategy.ENQUEUE)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m deployments.serve", description=(__doc__ or "").split("\n")[0]
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
    index_uri = args.index if local_path(args.index) is None else str(Path(args.index).resolve())
    source_dir = str(Path(args.source).resolve())
    reindex = ingest.to_deployment(
        name=args.name,
        cron=args.cron,
        parameters={"source_dir": source_dir, "index_uri": index_uri},
        concurrency_limit=ONE_AT_A_TIME,
        description=f"Re-index {source_dir} into {index_uri} ({args.cron}), one run at a time.",
        tags=["doc-indexer"],
    )
    search = query.to_deployment(
        name=args.name,
        parameters={"index_uri": index_uri},
        description=f"Search {index_uri}: the hits are the run's query-hits artifact.",
        tags=["doc-indexer"],
    )
    check = audit_index.to_deployment(
        name=args.name,
        parameters={"source_dir": source_dir, "index_uri": index_uri},
        description=f"Audit {index_uri} against {source_dir} (repair: set `repair`); the "
        "findings are the run's audit-report artifact.",
        tags=["doc-indexer"],
    )
    # to_deployment returns a RunnerDeployment when called outside an event loop, as here.
    serve(*(cast(RunnerDeployment, d) for d in (reindex, search, check)))


if __name__ == "__main__":
    main()
