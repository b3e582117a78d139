"""Where a dataset lives: a local folder or an object store, and how it is opened.

A dataset URI is a local path (or `file://` URI) or an object-store URI such as
`s3://bucket/prefix` (LanceDB also takes `gs://` and `az://`). Every part of the project opens
a dataset through `connect`, so local and object-store datasets behave the same.

Object-store settings come from the environment. LanceDB reads the standard variables itself
(for S3: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION or
AWS_DEFAULT_REGION, AWS_ENDPOINT_URL, AWS_ALLOW_HTTP). DOC_INDEXER_STORAGE_OPTIONS may hold a
JSON object of LanceDB storage options, e.g. {"endpoint": "http://127.0.0.1:9000",
"allow_http": "true", "region": "us-east-1"}; they override the variables. Local datasets
never get storage options.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from tasks.core.memory import lance_cache_bytes
from tasks.core.options import Settings, option

STORAGE_OPTIONS_ENV = "DOC_INDEXER_STORAGE_OPTIONS"
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_INDEX_URI = str(ROOT / "data" / "index")
LOCK_DIR = ROOT / ".cache" / "locks"  # this machine's files about object-store datasets

if TYPE_CHECKING:
    import lancedb


class DatasetError(Exception):
    """The dataset is missing or cannot be used as asked; the message says what to do."""


def local_path(uri: str) -> Path | None:
    """The folder of a local dataset; None for a dataset in an object store."""
    path = uri.removeprefix("file://")
    return None if "://" in path else Path(path)


def storage_options() -> dict[str, str]:
    """LanceDB storage options from DOC_INDEXER_STORAGE_OPTIONS; empty when it is unset.

    Booleans and numbers are accepted and passed on as text ("true", "30"), as LanceDB wants.
    """
    raw = os.environ.get(STORAGE_OPTIONS_ENV, "").strip()
    if not raw:
        return {}
    try:
        options = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{STORAGE_OPTIONS_ENV} is not valid JSON: {exc}") from None
    if not isinstance(options, dict) or not all(
        isinstance(value, str | bool | int | float) for value in options.values()
    ):
        raise DatasetError(
            f'{STORAGE_OPTIONS_ENV} must be a JSON object of option: value, e.g. {{"endpoint": '
            '"http://127.0.0.1:9000", "allow_http": "true"}'
        )
    return {key: _option_text(value) for key, value in options.items()}


def _option_text(value: str | bool | int | float) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def connect(uri: str, consistency: timedelta | None = None) -> lancedb.DBConnection:
    """Open the dataset at `uri`, with the storage options when it is in an object store.

    `consistency` is how often an open table checks for newer versions (None: never). A store
    that cannot be reached or listed (no such bucket, wrong endpoint or credentials) is a
    DatasetError naming the URI.
    """
    import lancedb  # here, not at the top: commands that only parse options (--help) skip it

    options = None if local_path(uri) else storage_options()
    cache = lance_cache_bytes()
    session = None if cache is None else lancedb.Session(cache, cache)
    try:
        return lancedb.connect(
            uri, read_consistency_interval=consistency, storage_options=options, session=session
        )
    except (OSError, ValueError) as exc:
        raise DatasetError(f"cannot open the dataset at {uri}: {exc}") from None


def lock_file(uri: str) -> Path:
    """The lock file of the local dataset at `uri`, in its folder (tasks/dataset/lock.py). An
    object-store dataset has no lock file: its lock holds across machines (a lock object in
    the store or a Prefect concurrency limit)."""
    folder = local_path(uri)
    if folder is None:
        raise ValueError(f"{uri} is in an object store: its lock is not a local file")
    return folder / ".ingest.lock"


def service_file(uri: str) -> Path:
    """The file in which a search service of the dataset at `uri` says where it listens on
    this machine (flows/service_client.py): beside the dataset's lock file, in the dataset's
    folder or, for an object store, under LOCK_DIR."""
    folder = local_path(uri)
    if folder is not None:
        return folder / ".service.json"
    return LOCK_DIR / f"{uri_digest(uri)}.service.json"


def uri_digest(uri: str) -> str:
    """A short name for a dataset's URI: its files on this machine, its Prefect lock's names."""
    return hashlib.sha256(uri.rstrip("/").encode()).hexdigest()[:16]


class DatasetOption(Settings):
    """The option every command shares: which dataset it works on."""

    index_uri: str = option(
        DEFAULT_INDEX_URI,
        "the LanceDB dataset: a folder, or an s3:// URI",
        flag="--index",
        metavar="URI",
    )
