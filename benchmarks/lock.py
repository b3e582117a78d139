"""What a dataset's lock costs a run, by kind (issue 38): taking it and releasing it.

    python -m benchmarks.lock [--smoke] [--rounds N]

Times, in this process, ROUNDS takes and releases of the lock of one dataset for each kind
of lock (tasks/dataset/lock.py): the file lock of a local dataset; the lock object of an
`s3://` dataset on moto's S3 server on 127.0.0.1 (the requests a run makes, without the
network's round trips a real store adds: two puts, one to take and one to release); and the
Prefect global concurrency limit, on the Prefect API in PREFECT_API_URL or else on a
temporary server in a fresh PREFECT_HOME (the same API as a `prefect server start`). A run
takes the lock once, so a row's median is what the lock adds to a run. --smoke: 3 rounds.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.support.prefect_api import prefect_api_in

if TYPE_CHECKING:
    from moto.server import ThreadedMotoServer

BUCKET = "doc-indexer-bench"
logger = logging.getLogger("benchmarks.lock")


def timed(take: Callable[[], AbstractContextManager[None]], rounds: int) -> list[float]:
    """Seconds of each take and release of the lock `take()` makes."""
    seconds = []
    for _ in range(rounds):
        started = time.perf_counter()
        with take():
            pass
        seconds.append(time.perf_counter() - started)
    return seconds


def moto_store() -> ThreadedMotoServer:
    """moto's S3 server with one bucket, configured as the datasets' store; returns it."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    keys = {"aws_access_key_id": "bench", "aws_secret_access_key": "bench"}
    endpoint = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **keys).create_bucket(
        Bucket=BUCKET
    )
    options = {"endpoint": endpoint, "allow_http": True, "region": "us-east-1", **keys}
    os.environ["DOC_INDEXER_STORAGE_OPTIONS"] = json.dumps(options)
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lock", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="3 rounds")
    parser.add_argument("--rounds", type=int, default=None, help="takes per kind (30)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.smoke else 30)
    with tempfile.TemporaryDirectory(prefix="doc-indexer-lock-") as scratch:
        work = Path(scratch)
        prefect_api_in(work)  # every run's, or a new home's temporary server
        from tasks.dataset.lock import file_lock
        from tasks.dataset.prefect_lock import prefect_lock
        from tasks.dataset.store_lock import store_lock

        moto = moto_store()
        local, remote = str(work / "index"), f"s3://{BUCKET}/index"
        kinds: dict[str, Callable[[], AbstractContextManager[None]]] = {
            "file lock (local dataset)": lambda: file_lock(local, 5, logger),
            "lock object (moto S3)": lambda: store_lock(remote, 5, logger, 60),
            "Prefect concurrency limit": lambda: prefect_lock(remote, 5, logger, 60),
        }
        print(f"{'lock':<28}{'rounds':>7}{'median ms':>11}{'p90 ms':>9}{'first ms':>10}")
        for name, take in kinds.items():
            seconds = [1000 * s for s in timed(take, rounds)]
            p90 = statistics.quantiles(seconds, n=10)[-1] if len(seconds) > 1 else seconds[0]
            median = statistics.median(seconds)
            print(f"{name:<28}{rounds:>7}{median:>11.1f}{p90:>9.1f}{seconds[0]:>10.1f}")
        moto.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
