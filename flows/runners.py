"""Where an ingest run's tasks execute: threads in this process (default) or a Dask cluster.

    --task-runner threads            Prefect's thread pool; one model in this process
    --task-runner dask               a local Dask cluster (Dask's default worker count)
    --task-runner dask --dask-address tcp://host:8786   an existing Dask cluster

On Dask, loads and embeds run on the workers; each worker process loads the model once (the
embedder is cached per process) and keeps it for every batch it embeds. A folder source must
be at the same path on every worker; an object-store source (`s3://…`) needs no shared
folder: a worker reads its batch's objects from the store itself (tasks/ingest/object_sources.py,
`load_objects`), with the store settings of its own environment (AWS_* variables or
DOC_INDEXER_STORAGE_OPTIONS, as the dataset takes them).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Literal

from pydantic import model_validator

from tasks.core.options import Settings, option

if TYPE_CHECKING:
    from prefect.task_runners import TaskRunner

# Prefect is imported where a runner is made or read: the command line reads these settings
# before it knows whether a flow will run (flows/ingest.py).


class RunnerSettings(Settings):
    """The command line's choice of task runner (deployments use the default)."""

    task_runner: Literal["threads", "dask"] = option(
        "threads", "where tasks run: threads in this process, or a Dask cluster"
    )
    dask_address: str | None = option(
        None,
        "a running Dask scheduler; without it, --task-runner dask starts a local cluster",
        metavar="tcp://HOST:PORT",
    )

    @model_validator(mode="after")
    def _address_needs_dask(self) -> RunnerSettings:
        if self.dask_address and self.task_runner != "dask":
            raise ValueError("--dask-address needs --task-runner dask")
        return self


def make_task_runner(settings: RunnerSettings) -> TaskRunner[Any]:
    """The task runner the settings name."""
    from prefect.task_runners import ThreadPoolTaskRunner

    if settings.task_runner == "threads":
        return ThreadPoolTaskRunner()
    from prefect_dask import DaskTaskRunner

    if settings.dask_address:
        return DaskTaskRunner(address=settings.dask_address)
    return DaskTaskRunner()


def parallel_batches() -> int:
    """How many batches the running flow embeds at once.

    One per Dask worker thread; otherwise one, because threads in one process share one model
    and the model already uses every core for a single batch.
    """
    from prefect.context import get_run_context

    context = get_run_context()
    runner = getattr(context, "task_runner", None)  # a flow run's context has one
    dask_runners = sys.modules.get("prefect_dask")  # not imported: not running on Dask
    if dask_runners is None or not isinstance(runner, dask_runners.DaskTaskRunner):
        return 1
    return max(1, sum(runner.client.nthreads().values()))
