"""The audit flow: prove that the index matches its folder and is whole, or repair it (its
command line is flows/audit.py).

Compares the folder, the documents ledger and the chunks table, inspects the vectors, the
pipeline fingerprint and the indexes (tasks/ingest/audit.py lists every check), logs the
outcome in one line and publishes the counts and the first examples of each problem as the
run's `audit-report` table artifact. With `repair` it fixes them in place (one ingest run
re-indexes the documents concerned; each document is replaced in one commit) and audits
again. The flow run ends Completed when clean, Failed with the number of problems otherwise.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.states import Completed, Failed, State

from tasks.core.artifacts import publish_artifact
from tasks.core.options import flow_parameters, option
from tasks.core.prefect_compat import prompt_heartbeats
from tasks.dataset.dataset import Dataset
from tasks.dataset.location import DatasetError, DatasetOption
from tasks.dataset.lock import LockOption
from tasks.ingest.audit import AuditReport, RepairPlan, audit, prepare_repair
from tasks.ingest.discover import ScanSettings
from tasks.ingest.object_sources import COPIES, resolve_source
from tasks.ingest.summary import IngestSummary

prompt_heartbeats()  # a flow run returns when its work is done, not up to 1 s later

audit_task = task(name="audit", cache_policy=NO_CACHE)(audit)
prepare_repair_task = task(name="prepare-repair", cache_policy=NO_CACHE)(prepare_repair)


class AuditRequest(ScanSettings, LockOption, DatasetOption):
    """Which dataset, against which folder (the scan options as the ingest runs had them)."""

    source_dir: str | None = option(
        None,
        "the folder or object-store prefix (s3://BUCKET/PREFIX) the index follows (default: the "
        "one its ledger records)",
        flag="--source",
    )
    repair: bool = option(False, "fix what the audit finds, then audit again")


def recorded_source(dataset: Dataset) -> str:
    """The folder the dataset's documents were read from, by its ledger."""
    rows = dataset.documents.search().select(["doc_id", "source_path"]).limit(1).to_list()
    if not rows:
        raise DatasetError(f"{dataset.uri} records no document yet: give the folder with --source")
    doc_id, path = rows[0]["doc_id"], rows[0]["source_path"]
    return path[: -len(doc_id)].rstrip("/\\") if path.endswith(doc_id) else path


@flow(name="audit")
@flow_parameters(AuditRequest)
def audit_index(request: AuditRequest) -> State[Any]:
    """Audit the dataset against its folder; with `repair`, fix and audit again. The run's
    data is the (last) AuditReport."""
    logger = get_run_logger()
    dataset = Dataset(request.index_uri)
    source = resolve_source(request.source_dir) if request.source_dir else recorded_source(dataset)
    scan = request.narrow(ScanSettings)
    report = audit_task(dataset, source, scan)
    _publish(report, logger)
    if request.repair and not report.clean:
        plan = RepairPlan.of(report)
        with dataset.lock(request.lock_timeout, logger):
            prepare_repair_task(dataset, plan)
        from flows.ingest import ingest  # a subflow run, shown under this one in the UI

        state = ingest(
            source_dir=source,
            index_uri=request.index_uri,
            rebuild=plan.rebuild,
            lock_timeout=request.lock_timeout,
            return_state=True,
            **scan.options(),
        )
        summary: IngestSummary = state.result()
        if plan.indexes and summary.run_tag is None:  # nothing else changed: still rebuild
            with dataset.lock(request.lock_timeout, logger):
                dataset.finalize(f"run-{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}")
        report = audit_task(Dataset(request.index_uri), source, scan)
        _publish(report, logger)
    COPIES.discard_all()  # the objects the audit downloaded to hash them
    if report.clean:
        return Completed(message="the index matches its folder", data=report)
    return Failed(message=f"{len(report.problems)} problem(s) found", data=report)


def _publish(report: AuditReport, logger: Any) -> None:
    logger.info(report.outcome())  # the whole report: the artifact, and the command's output
    from prefect.artifacts import create_table_artifact

    rows = report.rows() or [{"check": "none", "problems": 0, "meaning": "clean", "examples": ""}]
    publish_artifact(
        logger,
        create_table_artifact,
        key="audit-report",
        table=rows,
        description=f"audit of {report.index_uri} against {report.source_dir}",
    )
