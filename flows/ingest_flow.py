"""The ingest flow and its command line, which `python -m flows.ingest` (flows/ingest.py)
runs once Prefect's temporary server is starting: index new and changed documents, drop
vanished ones.

plan (scan, diff against the ledger) → for each batch of files: load → split → embed → write
(embedded batches together, one commit per few thousand chunks) → delete vanished documents
→ finalize (indexes, compaction, run tag).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.states import Completed, Failed, State

from flows.cli import exit_status
from flows.gate import GateQuestions, check_gate
from flows.runners import RunnerSettings, make_task_runner, parallel_batches
from flows.temporary_server import TemporaryServer
from tasks.core.memory import bound_native_memory
from tasks.core.options import add_options, flow_parameters, parse_options
from tasks.core.reasons import Reason
from tasks.dataset.dataset import Dataset
from tasks.dataset.location import DatasetError
from tasks.dataset.schema import Fingerprint
from tasks.embed.models import model_info
from tasks.ingest.discover import ScanSettings
from tasks.ingest.load import LoadSettings
from tasks.ingest.pipeline import BatchSettings, CommitSettings, file_batches, run_batches
from tasks.ingest.report import RunProgress, publish_summary, terminal_progress
from tasks.ingest.settings import GateSettings, IngestSettings, resolve_auto_model
from tasks.ingest.steps import (
    TaskStages,
    delete_task,
    finalize_task,
    first_forward_pass,
    plan_task,
    unwalked,
)
from tasks.ingest.summary import IngestSummary
from tasks.ingest.warmup import start_warm_up
from tasks.text.split import SplitSettings

GATE_FAILED = 4  # the exit status of a run whose gate restored the previous version
gate_task = task(name="gate", cache_policy=NO_CACHE)(check_gate)


@flow(name="ingest")
@flow_parameters(IngestSettings)
def ingest(settings: IngestSettings) -> State[Any]:
    """Index new and changed documents under `source_dir`, drop vanished ones.

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
            retry = frozenset({Reason.OCR_OFF}) if load.ocr != "off" else frozenset()
            ledger = unwalked(dataset.ledger())  # not walked by Prefect: one entry per file
            plan = plan_task(settings.source_dir, ledger, scan, fp.id, retry)
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

        with summary.timed("write"):
            summary.chunks_deleted = delete_task(dataset, unwalked(list(plan.removed)))
            summary.removed = len(plan.removed)
            dataset.refresh_stats(list(plan.touched))  # the scan's fast path, next time
        with summary.timed("finalize"):
            if plan.changes or not dataset.is_finalized():  # else: no new version to tag
                summary.run_tag = f"run-{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}"
                finalize_task(dataset, summary.run_tag)
            summary.table_version = dataset.chunks.version
        if questions and summary.run_tag:  # a new version: is search still as good?
            with summary.timed("gate"):
                summary.gate = gate_task(dataset, questions, previous_tag, gate.max_drop)
                if summary.gate.failed and previous_tag:
                    summary.table_version = dataset.restore(previous_tag)
                    summary.gate.restored = True

    summary.seconds = time.perf_counter() - started
    summary.first_forward_pass = first_forward_pass()
    logger.info("ingest finished in %.1f s: %s", summary.seconds, summary.counts_line())
    publish_summary(summary, logger)
    if summary.gate is not None and summary.gate.failed:
        return Failed(message=summary.outcome, data=summary)
    return Completed(message=summary.outcome, data=summary)


def run_command(argv: Sequence[str], description: str, server: TemporaryServer | None) -> int:
    """`python -m flows.ingest ARGV`; the flow runs on `server` where there is one."""
    parser = argparse.ArgumentParser(prog="python -m flows.ingest", description=description)
    add_options(parser, IngestSettings)
    add_options(parser.add_argument_group("task runner"), RunnerSettings)
    args = parser.parse_args(argv)
    settings = parse_options(parser, args, IngestSettings)
    settings = settings.model_copy(update={"source_dir": str(Path(settings.source_dir).resolve())})
    runner = parse_options(parser, args, RunnerSettings)
    flow_run = ingest.with_options(task_runner=make_task_runner(runner))

    def run() -> int:
        chosen = resolve_auto_model(settings)  # once: the warm-up and the flow get its spec
        if runner.task_runner == "threads":  # with Dask, workers parse and embed, not this process
            start_warm_up(chosen)
        try:
            if server is not None:
                server.wait_until_ready()
            with terminal_progress():  # a progress bar when a person watches the run
                state = flow_run(**chosen.options(), return_state=True)
                summary = state.result(raise_on_failure=False)
            if isinstance(summary, BaseException):
                raise summary
        except DatasetError:
            raise
        except Exception as exc:  # noqa: BLE001 - Prefect has logged the traceback
            print(f"error: the ingest run failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        print(summary.render())
        if summary.gate is not None and summary.gate.failed:
            return GATE_FAILED
        return 2 if summary.failed else 0

    return exit_status(run)
