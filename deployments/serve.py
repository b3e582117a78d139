"""Serve the `ingest` flow on a schedule, and the `query` flow for the Prefect UI.

    python -m deployments.serve [--source DIR] [--index URI] [--cron "0 * * * *"] [--name NAME]
                                [--watch [--debounce SECONDS]]

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
- `audit/<name>` checks the dataset against the source folder on demand
  (flows/audit_flow.py; with the `repair` parameter it fixes what it finds); its findings
  show as the `audit-report` table artifact, and a run that found problems ends Failed.

With `--watch` the process also keeps the dataset live with the source folder, as
`python -m flows.watch` does (flows/watch.py): a full reconcile run when it starts, then, for
every debounced group of file events, an `ingest` run of just the changed paths, in this
process (the model stays loaded), named `watch: N changed paths`. The cron schedule stays: it
catches whatever events missed. Those runs are not runs of the deployment, so its concurrency
slot does not cover them; the dataset's ingest lock keeps them and the deployment's runs
apart, as it does for a manual `flows.ingest`.

Why a concurrency limit of 1 with the ENQUEUE strategy on `ingest`: two ingest runs writing
the same LanceDB dataset at once would both diff against the same ledger and race on the
same documents. With the limit, the API hands out one slot; a run that comes due (or is
triggered) while another holds it is not started but put back in the Scheduled state named
`AwaitingConcurrencySlot` (visible in the UI) and retried until the slot is free. Queries
only read, so they have no limit.
"""

from __future__ import annotations

import argparse
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import cast

from prefect import serve
from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
from prefect.deployments.runner import RunnerDeployment

from flows.audit_flow import audit_index
from flows.ingest import ingest
from flows.query_flow import query
from flows.watch import watch_folder
from tasks.core.options import add_options, parse_options
from tasks.dataset.location import DEFAULT_INDEX_URI, local_path
from tasks.ingest.settings import IngestSettings
from tasks.ingest.watch import WatchSettings

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = ROOT / "data" / "sample"
DEFAULT_CRON = "0 * * * *"  # hourly, on the hour
DEFAULT_NAME = "reindex"

# One run at a time per deployment; a colliding run waits for the slot instead of being
# cancelled (ConcurrencyLimitStrategy.CANCEL_NEW would drop it).
ONE_AT_A_TIME = ConcurrencyLimitConfig(limit=1, collision_strategy=ConcurrencyLimitStrategy.ENQUEUE)
STOP_WATCHING_S = 600  # how long stopping waits for a watch run in progress to finish

log = logging.getLogger(__name__)


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
    parser.add_argument(
        "--watch",
        action="store_true",
        help="also index each change of the source folder within seconds (flows.watch)",
    )
    add_options(parser.add_argument_group("with --watch"), WatchSettings)
    args = parser.parse_args(argv)
    if not Path(args.source).is_dir():
        parser.error(f"source folder not found: {args.source}")
    args.watch_settings = parse_options(parser, args, WatchSettings)
    return args


def start_watching(
    source_dir: str, index_uri: str, watch: WatchSettings, stop: threading.Event
) -> threading.Thread:
    """Keep the dataset live in a thread of this process until `stop` is set; an error that
    ends the watch (the folder gone, the reconcile run failed) is logged, serving goes on."""
    settings = IngestSettings(source_dir=source_dir, index_uri=index_uri)

    def keep_live() -> None:
        try:
            watch_folder(settings, watch, stop)
        except Exception:  # noqa: BLE001 - the schedule still re-indexes; say why watching ended
            log.exception("watching %s stopped", source_dir)

    thread = threading.Thread(target=keep_live, name="watch", daemon=True)
    thread.start()
    return thread


def build_deployments(
    source_dir: str, index_uri: str, cron: str = DEFAULT_CRON, name: str = DEFAULT_NAME
) -> tuple[RunnerDeployment, RunnerDeployment, RunnerDeployment]:
    """The `ingest`, `query` and `audit` deployments named `name`: their parameters,
    schedule, concurrency limit, description and tags. `prefect.yaml` declares the same for a
    work pool (tests/test_work_pool.py checks that the two agree)."""
    reindex = ingest.to_deployment(
        name=name,
        cron=cron,
        parameters={"source_dir": source_dir, "index_uri": index_uri},
        concurrency_limit=ONE_AT_A_TIME,
        description=f"Re-index {source_dir} into {index_uri} ({cron}), one run at a time.",
        tags=["doc-indexer"],
    )
    search = query.to_deployment(
        name=name,
        parameters={"index_uri": index_uri},
        description=f"Search {index_uri}: the hits are the run's query-hits artifact.",
        tags=["doc-indexer"],
    )
    check = audit_index.to_deployment(
        name=name,
        parameters={"source_dir": source_dir, "index_uri": index_uri},
        description=f"Audit {index_uri} against {source_dir} (repair: set `repair`); the "
        "findings are the run's audit-report artifact.",
        tags=["doc-indexer"],
    )
    # to_deployment returns a RunnerDeployment when called outside an event loop, as here.
    return cast(
        tuple[RunnerDeployment, RunnerDeployment, RunnerDeployment], (reindex, search, check)
    )


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    # Absolute paths: runs execute in a subprocess and must not depend on its working directory.
    index_uri = args.index if local_path(args.index) is None else str(Path(args.index).resolve())
    source_dir = str(Path(args.source).resolve())
    deployments = build_deployments(source_dir, index_uri, args.cron, args.name)
    stop = threading.Event()
    watching = (
        start_watching(source_dir, index_uri, args.watch_settings, stop) if args.watch else None
    )
    try:
        serve(*deployments)
    finally:
        stop.set()
        if watching is not None:
            watching.join(STOP_WATCHING_S)


if __name__ == "__main__":
    main()
