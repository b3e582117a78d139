"""What an ingest run will need, made ready while Prefect starts: the parser and the model.

Before a flow's first line runs, Prefect creates the flow run, and without an API server it
first starts a temporary one (seconds). The run's first load then starts the parser processes
(imports unstructured) and its first embed loads the model. `start_warm_up` does both in
background threads of the command-line process during that wait, but only when the run will
index something: the run's plan read ahead (tasks/ingest/preview.py) decides, so a run with
nothing to index still loads no model; for a new dataset, the first document found in the
folder does. Nothing here is needed for correctness: any error is left for the run itself to
meet and report.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from tasks.dataset.dataset import Dataset
from tasks.dataset.object_store import is_object_url
from tasks.embed.models import get_embedder, model_info
from tasks.ingest.load import process_parsers
from tasks.ingest.object_sources import holds_a_document
from tasks.ingest.preview import plan_ahead
from tasks.ingest.settings import IngestSettings
from tasks.parse.formats import MIME_TYPES

log = logging.getLogger(__name__)


def will_index(settings: IngestSettings) -> bool:
    """Whether the run will load files: a rebuild, a new dataset with files, or changed files.

    False where the run will stop before loading anything (a dataset built with another
    fingerprint asks for --rebuild)."""
    dataset = Dataset(settings.index_uri)
    if settings.rebuild or not dataset.exists():
        if is_object_url(settings.source_dir):
            return holds_a_document(settings.source_dir)
        return _holds_a_document(Path(settings.source_dir))
    plan = plan_ahead(settings, dataset)
    return plan is not None and bool(plan.to_index)


def _holds_a_document(folder: Path) -> bool:
    """Whether any file under `folder` has a supported suffix: stops at the first one, and
    hashes nothing (a new dataset's run indexes every file; the scan's finer rules are the
    run's business)."""
    return any(
        Path(name).suffix.lower() in MIME_TYPES for _, _, files in os.walk(folder) for name in files
    )


def _quietly(step: Callable[[], object]) -> None:
    try:
        step()
    except Exception:  # noqa: BLE001 - the run meets the same error and reports it
        log.debug("warm-up step failed", exc_info=True)


def _warm_up(settings: IngestSettings) -> None:
    if not will_index(settings):
        return
    model = threading.Thread(
        target=_quietly, args=(lambda: get_embedder(settings.model),), daemon=True
    )
    model.start()
    process_parsers(model_info(settings.model).busy_cores).start()  # the run's loads use it


def start_warm_up(settings: IngestSettings) -> threading.Thread:
    """Start making the parser process and the model ready in the background."""
    thread = threading.Thread(
        target=_quietly, args=(lambda: _warm_up(settings),), name="warm-up", daemon=True
    )
    thread.start()
    return thread
