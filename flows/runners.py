"""Where an ingest run's tasks execute: threads in this process (default) or a Dask cluster.

    --task-runner threads            Prefect's thread pool; one model in this process
    --task-runner dask               a local Dask cluster (Dask's default worker count)
    --task-runner dask --dask-address tcp://host:8786   an existing Dask cluster

On Dask, loads and embeds run on the workers; each worker process loads the model once (the
embedder is cached per process) and keeps it for every batch it embeds.
"""

from __future__ import annotations

import sys

from prefect.context import get_run_context
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

TASK_RUNNERS = ("threads", "dask")


def make_task_runner(name: str, dask_address: str | None = None) -> TaskRunner:
    """The task runner called `name`; `dask_address` connects to a running Dask scheduler."""
    if name not in TASK_RUNNERS:
        raise ValueError(f"unknown task runner {name!r}; choose from {', '.join(TASK_RUNNERS)}")
    if name == "threads":
        return ThreadPoolTaskRunner()
    from prefect_dask import DaskTaskRunner

    return DaskTaskRunner(address=dask_address) if dask_address else DaskTaskRunner()


def parallel_batches() -> int:
    """How many batches the running flow embeds at once.

    One per Dask worker thread; otherwise one, because threads in one process share one model
    and torch already uses every core for a single batch.
    """
    runner = get_run_context().task_runner
    dask_runners = sys.modules.get("prefect_dask")  # not imported: not running on Dask
    if dask_runners is None or not isinstance(runner, dask_runners.DaskTaskRunner):
        return 1
    return max(1, sum(runner.client.nthreads().values()))
