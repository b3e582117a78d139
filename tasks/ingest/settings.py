"""Every option of an ingest run, declared once in the settings of the step it belongs to.

`IngestSettings` is their union: the command line (`python -m flows.ingest --help`), the
`ingest` flow's parameters and the deployment's parameters are all derived from it
(tasks/core/options.py). `narrow()` hands each step its own part.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from pydantic import field_validator

from tasks.core.options import Settings, option, positional
from tasks.dataset.dataset import Dataset
from tasks.dataset.location import DatasetOption, local_path
from tasks.dataset.lock import LockOption
from tasks.dataset.object_store import is_object_url
from tasks.embed.models import DEFAULT_MODEL, known_specs, model_spec_for, parse_spec
from tasks.ingest.discover import RetrySettings, ScanSettings
from tasks.ingest.load import LoadSettings
from tasks.ingest.pipeline import BatchSettings, CommitSettings
from tasks.text.split import SplitSettings

AUTO_MODEL = "auto"  # the dataset's own model; for a new dataset, DEFAULT_MODEL
S = TypeVar("S", bound="RunSettings")


class RunSettings(LockOption, DatasetOption):
    """What to index, where to, with which model."""

    source_dir: str = positional(
        "folder of documents to index, or an object-store prefix (s3://BUCKET/PREFIX, gs://, az://)"
    )
    model: str = option(
        AUTO_MODEL,
        f"embedding model: auto (the model the dataset was built with; {DEFAULT_MODEL} for a "
        f"new one) or BACKEND:MODEL, where the backends are: {known_specs()}",
    )
    rebuild: bool = option(False, "drop the dataset's tables and index everything again")

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if value != AUTO_MODEL:  # `auto` is resolved where the run starts: resolve_auto_model
            parse_spec(value)  # an unknown spec: a ValueError that lists the known ones
        return value

    @field_validator("source_dir")
    @classmethod
    def _is_a_folder(cls, value: str) -> str:
        """A local folder that exists (a `file://` URI becomes its path), or an object URL:
        whether that can be listed is the run's first step (no request while validating)."""
        if is_object_url(value):
            return value.rstrip("/")
        folder = local_path(value) or Path(value)
        if not folder.is_dir():
            raise ValueError(f"source folder not found: {value}")
        return str(folder)


class GateSettings(Settings):
    """A run that makes search worse on the user's own questions is undone."""

    gate: list[str] | None = option(
        None,
        "QUERIES.jsonl QRELS.tsv: after a run that changed the dataset, score hybrid nDCG@10 "
        "on these; if it fell by more than --max-drop against the previous run's version, "
        "restore that version and end the run failed",
        several=True,
        metavar="FILE",
    )
    max_drop: float = option(0.01, "the nDCG@10 drop --gate allows", ge=0)

    @field_validator("gate")
    @classmethod
    def _two_files(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return value
        if len(value) != 2:
            raise ValueError("--gate takes two files: QUERIES.jsonl QRELS.tsv")
        missing = [path for path in value if not Path(path).is_file()]
        if missing:
            raise ValueError(f"--gate file not found: {', '.join(missing)}")
        return value


class IngestSettings(
    GateSettings,
    RetrySettings,
    ScanSettings,
    LoadSettings,
    CommitSettings,
    BatchSettings,
    SplitSettings,
    RunSettings,
):
    """Every option of an ingest run (pydantic lists the fields of the last base first)."""


def resolve_auto_model(settings: S) -> S:
    """The settings with `--model auto` replaced by the model the run uses: an existing
    dataset keeps the model it was built with (so one built by an older default keeps updating
    as it was), a new one gets DEFAULT_MODEL. Any other model is kept as given.

    It reads the dataset, so it is called once where a run starts, not while validating.
    """
    if settings.model != AUTO_MODEL:
        return settings
    built = Dataset(settings.index_uri).built_with()
    return settings.model_copy(update={"model": model_spec_for(built) if built else DEFAULT_MODEL})
