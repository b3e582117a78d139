"""The ingest flow: index new and changed documents, drop vanished ones (its command line is
flows/ingest.py).

plan (scan, diff against the ledger) → for each batch of files: load → split → embed → write
(embedded batches together, one commit per few thousand chunks) → delete vanished documents
→ finalize (indexes, compaction, run tag).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.states import Completed, Failed, State

from flows.gate import GateQuestions, check_gate
from flows.runners import parallel_batches
from tasks.core.memory import bound_native_memory
from tasks.core.options import flow_parameters
from tasks.core.prefect_compat import prompt_heartbeats
from tasks.dataset.dataset import Dataset
from tasks.dataset.schema import Fingerprint
from tasks.embed.models import model_info
from tasks.ingest.discover import ScanSettings
from tasks.ingest.load import LoadSettings
from tasks.ingest.object_sources import discard_copies
from tasks.ingest.pipeline import BatchSettings, CommitSettings, file_batches, run_batches
from tasks.ingest.preview import retried
from tasks.ingest.report import RunProgress, publish_summary
from tasks.ingest.settings import GateSettings, IngestSettings, resolve_auto_model
from tasks.ingest.steps import (
    TaskStages,
    delete_task,
    finalize_task,
    plan_task,
    unwalked,
)
from tasks.ingest.summary import IngestSummary
from tasks.text.split import SplitSettings

prompt_heartbeats()  # a flow run returns when its work is done, not up to 1 s later

gate_task = task(name="gate", cache_policy=NO_CACHE)(check_gate)


@flow(name="ingest")
@flow_parameters(IngestSettings)
def ingest(settings: IngestSettings) -> State[Any]:
    """Index new and changed documents under `source_dir` (a folder or an object-store
    prefix), drop vanished ones.

    Runs on one dataset never overlap: a second run waits up to `lock_timeout` seconds. The
    run ends Completed even when some files failed (its message says how many); calling the
    flow returns its IngestSummary.
    """
    logger = get_run_logger()
    started = time.perf_counter()
    bound_native_memory()  # before the run's first Lance scan: the writer's memory stays flat
    settings = resolve_auto_model(settings)  # a no-op when main() has resolved it
    summary = IngestSummary(index_uri=settings.index_uri)
    model, split = model_info(settings.model), settings.narrow(SplitSettings)
    summary.max_tokens = model.max_tokens
    fp = Fingerprint.of(model, split)
    dataset = Dataset(settings.index_uri)
    gate = settings.narrow(GateSettings)
    questions = GateQuestions.read(gate) if gate.gate else None
    with dataset.lock(settings.lock_timeout, logger):
        with summary.timed("discover"):
            dataset.prepare(fp, settings.rebuild)
            scan = settings.narrow(ScanSettings)
            load = settings.narrow(LoadSettings)
            retry = retried(load)
            ledger = unwalked(dataset.ledger())  # not walked by Prefect: one entry per file
            plan = plan_task(settings.source_dir, ledger, scan, fp.id, retry, settings.retry_failed)
            previous_tag = next(reversed(dataset.run_tags()), None) if questions else None
        summary.add_plan(plan)
        logger.info(plan.describe())

        stages = TaskStages(dataset, settings.model, load, split, logger)
        batches = file_batches(plan.to_index, settings.narrow(BatchSettings))
        progress = RunProgress(len(plan.to_index), logger)
        commits = settings.narrow(CommitSettings)
        for outcome in run_batches(
            batches, stages, parallel_batches(), clock=summary, commits=commits
        ):
            summary.add_batch(outcome)
            progress.update(summary)
        discard_copies((*plan.to_index, *plan.touched))  # objects downloaded to plan and load

        with summary.timed("write"):
            summary.chunks_deleted = delete_task(dataset, unwalked(list(plan.removed)))
            summary.removed = len(plan.removed)
            dataset.refresh_stats(list(plan.touched))  # the scan's fast path, next time
        with summary.timed("finalize"):
            if dataset.chunks_changed():  # a new state of the chunks: a new run tag
                summary.run_tag = f"run-{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}"
                finalize_task(dataset, summary.run_tag)
            elif not dataset.is_finalized():  # the ledger alone changed: no tag of its own
                dataset.finalize_ledger()
            summary.table_version = dataset.chunks.version
        if questions and summary.run_tag:  # a new version: is search still as good?
            with summary.timed("gate"):
                summary.gate = gate_task(dataset, questions, previous_tag, gate.max_drop)
                if summary.gate.failed and previous_tag:
                    summary.table_version = dataset.restore(previous_tag)
                    summary.gate.restored = True

    summary.seconds = time.perf_counter() - started
    summary.first_forward_pass = stages.clock.first_forward_pass()
    logger.info("ingest finished in %.1f s: %s", summary.seconds, summary.counts_line())
    publish_summary(summary, logger)
    if summary.gate is not None and summary.gate.failed:
        return Failed(message=summary.outcome, data=summary)
    return Completed(message=summary.outcome, data=summary)
