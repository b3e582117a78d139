"""Find the documents under a source folder and decide what a run has to do with them."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

from tasks.core.formats import MIME_TYPES
from tasks.core.options import Settings, option
from tasks.core.reasons import Reason, Status
from tasks.core.records import LedgerEntry, SourceFile

# Names of files and folders that are never documents: hidden ones (.git/, .DS_Store),
# Office lock files, editor backups and swap files.
DEFAULT_EXCLUDE = (".*", "~$*", "*~", "*.swp", "*.swo", "*.tmp")


class ScanSettings(Settings):
    """Which files a scan picks up.

    `exclude` globs match the name of any file or folder on the way (a matching folder is not
    entered) and add to DEFAULT_EXCLUDE; `include` globs, when given, must match the path
    relative to the root. Symlinked folders are never entered (no loops); a symlinked file is
    read only if it resolves inside the root.
    """

    include: list[str] | None = option(
        None, "only paths (relative to the folder) matching GLOB; repeatable", metavar="GLOB"
    )
    exclude: list[str] | None = option(
        None,
        "also skip file and folder names matching GLOB; repeatable (hidden and editor "
        "temp files always are)",
        metavar="GLOB",
    )

    def excluded(self, name: str) -> bool:
        return any(fnmatchcase(name, p) for p in (*DEFAULT_EXCLUDE, *(self.exclude or ())))

    def included(self, doc_id: str) -> bool:
        return not self.include or any(fnmatchcase(doc_id, p) for p in self.include)


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Scan:
    """The supported files under a root, and the folders that could not be listed."""

    files: tuple[SourceFile, ...]
    unreadable_dirs: tuple[str, ...] = field(default=())  # relative posix paths, "" = the root


def discover(
    root: str | Path,
    known: Mapping[str, LedgerEntry] | None = None,
    settings: ScanSettings | None = None,
) -> Scan:
    """Every supported document under `root` that the settings select, hashed, by doc_id.

    A file whose size and mtime match its ledger entry keeps the recorded hash without being
    read (the fast path); any other file is hashed. A file that cannot be read gets an empty
    hash, so the run tries to load it and records why it failed. Folders that cannot be listed
    are reported, so that nothing under them is taken as deleted.
    """
    root = Path(root).resolve()
    if not root.is_dir():
        raise NotADirectoryError(f"source folder not found: {root}")
    known = known or {}
    settings = settings or ScanSettings()
    unreadable: list[str] = []

    def on_error(error: OSError) -> None:
        path = Path(error.filename or root)
        unreadable.append("" if path == root else path.relative_to(root).as_posix())

    found: list[SourceFile] = []
    for folder, dirs, files in os.walk(root, onerror=on_error):
        dirs[:] = sorted(d for d in dirs if not settings.excluded(d))
        for name in files:
            mime = MIME_TYPES.get(Path(name).suffix.lower())
            path = Path(folder, name)
            doc_id = path.relative_to(root).as_posix()
            if mime is None or settings.excluded(name) or not settings.included(doc_id):
                continue
            if path.is_symlink() and not path.resolve().is_relative_to(root):
                continue
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue  # vanished while listing, or a dangling link: it is not there
            mtime_us = stat.st_mtime_ns // 1000
            entry = known.get(doc_id)
            if entry and (entry.size, entry.mtime_us) == (stat.st_size, mtime_us):
                content_hash = entry.content_hash
            else:
                try:
                    content_hash = file_sha256(path)
                except OSError:
                    content_hash = ""  # unreadable: load records the reason
            found.append(SourceFile(doc_id, str(path), stat.st_size, mtime_us, content_hash, mime))
    return Scan(tuple(sorted(found, key=lambda f: f.doc_id)), tuple(sorted(unreadable)))


@dataclass(frozen=True)
class Plan:
    """What a run does: index these files, leave those alone, remove the vanished ones."""

    to_index: tuple[SourceFile, ...]
    unchanged: tuple[SourceFile, ...]
    removed: tuple[str, ...]  # doc_ids in the ledger that are no longer on disk
    kept_unseen: tuple[str, ...] = ()  # not seen, but under a folder that could not be listed
    unreadable_dirs: tuple[str, ...] = ()  # folders the scan could not list
    touched: tuple[SourceFile, ...] = ()  # unchanged bytes, but another size or mtime

    @property
    def changes(self) -> bool:
        """Whether the run has anything to write."""
        return bool(self.to_index or self.removed or self.touched)

    @property
    def files_seen(self) -> int:
        return len(self.to_index) + len(self.unchanged)

    def describe(self) -> str:
        """One line for the run log."""
        return (
            f"{self.files_seen} files: {len(self.to_index)} to index, {len(self.unchanged)} "
            f"unchanged, {len(self.removed)} removed; unreadable folders: "
            f"{', '.join(self.unreadable_dirs) or 'none'}"
        )


def is_under(doc_id: str, folder: str) -> bool:
    """Whether `doc_id` lies under the relative `folder` ("" is the root)."""
    return folder == "" or doc_id.startswith(folder + "/")


def plan_changes(
    scan: Scan,
    ledger: Mapping[str, LedgerEntry],
    fingerprint: str,
    retry: frozenset[Reason] = frozenset(),
) -> Plan:
    """Diff a completed scan against the ledger by content hash.

    A file is unchanged when its bytes, the pipeline fingerprint and a successful status all
    match the ledger; failed documents, and documents left empty for one of the `retry`
    reasons (`ocr_off` when this run has OCR on), are tried again. An unchanged file whose
    size or mtime differ from the ledger's is also `touched` (its new ones are recorded). A
    ledger entry missing from the scan is removed only if no unreadable folder could be hiding
    it.
    """
    to_index: list[SourceFile] = []
    unchanged: list[SourceFile] = []
    touched: list[SourceFile] = []
    for source in scan.files:
        entry = ledger.get(source.doc_id)
        same = (
            entry is not None
            and source.content_hash != ""
            and entry.content_hash == source.content_hash
            and entry.pipeline_fingerprint == fingerprint
            and entry.status != Status.FAILED
            and entry.reason not in retry
        )
        (unchanged if same else to_index).append(source)
        recorded = (entry.size, entry.mtime_us) if entry is not None else None
        if same and recorded != (source.size, source.mtime_us):  # same bytes, touched
            touched.append(source)
    seen = {source.doc_id for source in scan.files}
    unseen = sorted(doc_id for doc_id in ledger if doc_id not in seen)
    hidden = {d for d in unseen if any(is_under(d, folder) for folder in scan.unreadable_dirs)}
    removed = [d for d in unseen if d not in hidden]
    return Plan(
        tuple(to_index),
        tuple(unchanged),
        tuple(removed),
        tuple(sorted(hidden)),
        scan.unreadable_dirs,
        tuple(touched),
    )


def plan_run(
    root: str | Path,
    ledger: Mapping[str, LedgerEntry],
    settings: ScanSettings,
    fingerprint: str,
    retry: frozenset[Reason] = frozenset(),
) -> Plan:
    """Scan `root` (hashing only files whose size or mtime changed) and diff it against the
    ledger: the plan of a run."""
    return plan_changes(discover(root, ledger, settings), ledger, fingerprint, retry)
