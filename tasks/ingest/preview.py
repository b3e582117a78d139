"""What an ingest run will do, seen before it starts: the same plan the run makes first (a
scan of the folder against the dataset's ledger), read without the dataset's lock.

The command line reads it while Prefect's temporary server starts: without a Prefect API, a
run that would change nothing is not started (`unchanged_run`), as a question without one is
not recorded either; the warm-up reads it to decide whether to load the parser and the model.
"""

from __future__ import annotations

import time

from tasks.core.reasons import Reason
from tasks.dataset.dataset import Dataset
from tasks.dataset.schema import Fingerprint
from tasks.embed.models import model_info
from tasks.ingest.discover import Plan, ScanSettings, plan_run
from tasks.ingest.load import LoadSettings
from tasks.ingest.settings import IngestSettings
from tasks.ingest.summary import IngestSummary
from tasks.text.split import SplitSettings


def retried(load: LoadSettings) -> frozenset[Reason]:
    """Failure reasons that another run under `load` tries again: OCR_OFF when OCR is on."""
    return frozenset({Reason.OCR_OFF}) if load.ocr != "off" else frozenset()


def fingerprint(settings: IngestSettings) -> Fingerprint:
    """What the run's dataset must have been built with (its model and splitter)."""
    return Fingerprint.of(model_info(settings.model), settings.narrow(SplitSettings))


def plan_ahead(settings: IngestSettings, dataset: Dataset) -> Plan | None:
    """The plan the run will make of `dataset` (the one `settings` name), where it exists and
    was built as `settings` ask; None for a new dataset, a rebuild, or another fingerprint
    (the run stops)."""
    if settings.rebuild or not dataset.exists() or dataset.fingerprint != fingerprint(settings):
        return None
    retry = retried(settings.narrow(LoadSettings))
    return plan_run(
        settings.source_dir,
        dataset.ledger(),
        settings.narrow(ScanSettings),
        dataset.fingerprint.id,
        retry,
        settings.retry_failed,
    )


def unchanged_run(settings: IngestSettings) -> IngestSummary | None:
    """The summary of a run that would write nothing (nothing to index, remove or refresh,
    and the dataset finalized); None when the run has something to do."""
    started = time.perf_counter()
    dataset = Dataset(settings.index_uri)
    plan = plan_ahead(settings, dataset)
    if plan is None or plan.changes or not dataset.is_finalized():
        return None
    summary = IngestSummary(index_uri=settings.index_uri)
    summary.max_tokens = model_info(settings.model).max_tokens
    summary.add_plan(plan)
    summary.table_version = dataset.chunks.version
    summary.seconds = summary.stage_seconds["discover"] = time.perf_counter() - started
    return summary
