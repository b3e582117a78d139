"""Every option of an ingest run, declared once in the settings of the step it belongs to.

`IngestSettings` is their union: the command line (`python -m flows.ingest --help`), the
`ingest` flow's parameters and the deployment's parameters are all derived from it
(tasks/core/options.py). `narrow()` hands each step its own part.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import field_validator

from tasks.core.options import option, positional
from tasks.dataset.location import DatasetOption
from tasks.embed.models import DEFAULT_MODEL
from tasks.ingest.discover import ScanSettings
from tasks.ingest.load import LoadSettings
from tasks.ingest.pipeline import BatchSettings
from tasks.text.split import SplitSettings


class RunSettings(DatasetOption):
    """What to index, where to, with which model."""

    source_dir: str = positional("folder of documents to index")
    model: str = option(
        DEFAULT_MODEL,
        "embedding model: all-MiniLM-L6-v2, onnx:all-MiniLM-L6-v2, onnx-int8:all-MiniLM-L6-v2, "
        "a sentence-transformers model on disk, or hash (tests)",
    )
    rebuild: bool = option(False, "drop the dataset's tables and index everything again")
    lock_timeout: float = option(
        3600.0, "seconds to wait for another ingest run on the same dataset", ge=0
    )

    @field_validator("source_dir")
    @classmethod
    def _is_a_folder(cls, value: str) -> str:
        if not Path(value).is_dir():
            raise ValueError(f"source folder not found: {value}")
        return value


class IngestSettings(ScanSettings, LoadSettings, BatchSettings, SplitSettings, RunSettings):
    """Every option of an ingest run (pydantic lists the fields of the last base first)."""
