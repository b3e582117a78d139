"""Find the documents under a source folder and decide what a run has to do with them."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from prefect import task

from tasks.records import FAILED, SourceFile

MIME_TYPES = {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".html": "text/html",
    ".htm": "text/html",
    ".pdf": "application/pdf",
    ".txt": "text/plain",
}

# Editor, OS and VCS leftovers that are never documents.
_IGNORED_PREFIXES = (".", "~$")
_IGNORED_SUFFIXES = ("~", ".swp", ".swo", ".tmp")


def _ignored(name: str) -> bool:
    return name.startswith(_IGNORED_PREFIXES) or name.endswith(_IGNORED_SUFFIXES)


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def discover(root: str | Path) -> list[SourceFile]:
    """Every supported document under `root`, hashed, sorted by doc_id.

    Hidden files and folders and editor temp files are skipped; symlinked folders are not
    followed.
    """
    root = Path(root).resolve()
    if not root.is_dir():
        raise NotADirectoryError(f"source folder not found: {root}")
    found: list[SourceFile] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not _ignored(d))
        for name in sorted(files):
            mime = MIME_TYPES.get(Path(name).suffix.lower())
            if mime is None or _ignored(name):
                continue
            path = Path(folder, name)
            stat = path.stat()
            found.append(
                SourceFile(
                    doc_id=path.relative_to(root).as_posix(),
                    path=str(path),
                    size=stat.st_size,
                    mtime=stat.st_mtime,
                    content_hash=file_sha256(path),
                    mime_type=mime,
                )
            )
    return sorted(found, key=lambda f: f.doc_id)


@dataclass(frozen=True)
class LedgerEntry:
    """What the documents table says about one document."""

    content_hash: str
    status: str
    pipeline_fingerprint: str


@dataclass(frozen=True)
class Plan:
    """What a run does: index these files, leave those alone, remove the vanished ones."""

    to_index: tuple[SourceFile, ...]
    unchanged: tuple[SourceFile, ...]
    removed: tuple[str, ...]  # doc_ids in the ledger that are no longer on disk


def plan_changes(
    files: list[SourceFile], ledger: Mapping[str, LedgerEntry], fingerprint: str
) -> Plan:
    """Diff the folder against the ledger by content hash.

    A file is unchanged when its bytes, the pipeline fingerprint and a successful status all
    match the ledger; failed documents are always tried again.
    """
    to_index, unchanged = [], []
    for source in files:
        entry = ledger.get(source.doc_id)
        same = (
            entry is not None
            and entry.content_hash == source.content_hash
            and entry.pipeline_fingerprint == fingerprint
            and entry.status != FAILED
        )
        (unchanged if same else to_index).append(source)
    on_disk = {source.doc_id for source in files}
    removed = tuple(sorted(doc_id for doc_id in ledger if doc_id not in on_disk))
    return Plan(tuple(to_index), tuple(unchanged), removed)


discover_task = task(discover, name="discover", retries=2, retry_delay_seconds=[1, 5])
plan_task = task(plan_changes, name="plan")
