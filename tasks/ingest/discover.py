"""Find the documents under a source folder and decide what a run has to do with them."""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cache
from pathlib import Path, PurePosixPath
from stat import S_ISDIR, S_ISLNK

from pydantic import field_validator

from tasks.core.options import Settings, option
from tasks.core.reasons import Reason, Status
from tasks.core.records import LedgerEntry, SourceFile
from tasks.dataset.object_store import is_object_url
from tasks.ingest.object_sources import list_objects
from tasks.parse.formats import MIME_TYPES

# Names of files and folders that are never documents: hidden ones (.git/, .DS_Store),
# Office lock files, editor backups and swap files.
DEFAULT_EXCLUDE = (".*", "~$*", "*~", "*.swp", "*.swo", "*.tmp")


class ScanSettings(Settings):
    """Which files a scan picks up.

    `exclude` globs match the name of any file or folder on the way (a matching folder is not
    entered) and add to DEFAULT_EXCLUDE; `include` globs, when given, must match the path
    relative to the root. Symlinked folders are never entered (no loops); a symlinked file is
    read only if it resolves inside the root. `paths`, when given, restricts the scan to those
    files and folders (what a watcher saw change): nothing else is listed or hashed, and only
    documents under them can be found removed.
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
    paths: list[str] | None = option(
        None,
        "only list and hash these files or folders (relative to the folder), and remove only "
        "documents under them: a run of just the changed paths; repeatable",
        flag="--path",
        metavar="PATH",
    )

    @field_validator("paths")
    @classmethod
    def _relative(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else [relative_path(path) for path in value]

    def excluded(self, name: str) -> bool:
        return _any_glob((*DEFAULT_EXCLUDE, *(self.exclude or ())))(name) is not None

    def included(self, doc_id: str) -> bool:
        return not self.include or _any_glob(tuple(self.include))(doc_id) is not None


@cache
def _any_glob(globs: tuple[str, ...]) -> Callable[[str], object]:
    """A matcher of names against any of the globs, case-sensitive as `fnmatchcase` (one
    compiled pattern: a scan asks it of every file)."""
    return re.compile("|".join(f"(?:{fnmatch.translate(glob)})" for glob in globs)).match


def relative_path(path: str) -> str:
    """`path` as a posix path relative to the source folder ("" is the folder itself); a
    ValueError for an absolute path or one that climbs out with `..`."""
    relative = PurePosixPath(path.replace(os.sep, "/"))
    if relative.is_absolute() or ".." in relative.parts:
        raise ValueError(f"{path!r} is not a path inside the folder (relative, without ..)")
    return "" if relative == PurePosixPath(".") else relative.as_posix()


def outermost(paths: Iterable[str]) -> tuple[str, ...]:
    """The paths that lie under no other one of them, sorted: "a" covers "a/b.md"."""
    kept: list[str] = []
    for path in sorted(set(paths)):  # a folder sorts before what lies under it
        if not any(is_under(path, folder) for folder in kept):
            kept.append(path)
    return tuple(kept)


def is_under(doc_id: str, folder: str) -> bool:
    """Whether `doc_id` lies under the relative `folder` ("" is the root)."""
    return folder == "" or doc_id.startswith(folder + "/")


def in_scope(doc_id: str, scope: frozenset[str]) -> bool:
    """Whether `doc_id` is one of the relative paths in `scope` or lies under one of them."""
    parts = doc_id.split("/")
    return "" in scope or any("/".join(parts[:i]) in scope for i in range(1, len(parts) + 1))


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
    scope: tuple[str, ...] | None = None  # the paths scanned (ScanSettings.paths); None: all


def discover(
    root: str | Path,
    known: Mapping[str, LedgerEntry] | None = None,
    settings: ScanSettings | None = None,
) -> Scan:
    """Every supported document under `root` that the settings select, hashed, by doc_id.

    A file whose size and mtime match its ledger entry keeps the recorded hash without being
    read (the fast path); any other file is hashed. A file that cannot be read gets an empty
    hash, so the run tries to load it and records why it failed. Folders that cannot be listed
    are reported, so that nothing under them is taken as deleted. With `settings.paths`, only
    those files and folders are looked at, by the same rules as a whole scan: a path under an
    excluded or symlinked folder finds nothing, nor does one that is gone. An object-store URL
    is listed by the same rules (tasks/ingest/object_sources.py).
    """
    known = known or {}
    settings = settings or ScanSettings()
    scope = None if settings.paths is None else outermost(settings.paths)
    if is_object_url(str(root)):
        return Scan(list_objects(str(root), known, scope, settings), (), scope)
    root = Path(root).resolve()
    if not root.is_dir():
        raise NotADirectoryError(f"source folder not found: {root}")
    unreadable: list[str] = []

    def on_error(error: OSError) -> None:
        path = Path(error.filename or root)
        unreadable.append("" if path == root else path.relative_to(root).as_posix())

    def source_file(path: str, doc_id: str, name: str) -> SourceFile | None:
        """The file at `path` if a scan picks it up, hashed unless the ledger has it. Plain
        strings and one stat call per file: a scan of 100,000 files does this 100,000 times."""
        mime = MIME_TYPES.get(os.path.splitext(name)[1].lower())
        if mime is None or settings.excluded(name) or not settings.included(doc_id):
            return None
        try:
            stat = os.lstat(path)
            if S_ISLNK(stat.st_mode):
                if not Path(path).resolve().is_relative_to(root):
                    return None
                stat = os.stat(path)
        except FileNotFoundError:
            return None  # vanished while listing, or a dangling link: it is not there
        mtime_us = stat.st_mtime_ns // 1000
        entry = known.get(doc_id)
        if entry and (entry.size, entry.mtime_us) == (stat.st_size, mtime_us):
            content_hash = entry.content_hash
        else:
            try:
                content_hash = file_sha256(path)
            except OSError:
                content_hash = ""  # unreadable: load records the reason
        return SourceFile(doc_id, path, stat.st_size, mtime_us, content_hash, mime)

    def walk(top: Path) -> Iterable[SourceFile | None]:
        for folder, dirs, files in os.walk(top, onerror=on_error):
            dirs[:] = sorted(d for d in dirs if not settings.excluded(d))
            relative = os.path.relpath(folder, root)
            prefix = "" if relative == "." else relative.replace(os.sep, "/") + "/"
            for name in files:
                yield source_file(os.path.join(folder, name), prefix + name, name)

    def look_at(relative: str) -> Iterable[SourceFile | None]:
        """What a whole scan would find at the relative path: a folder's files, a file."""
        if relative == "":
            return walk(root)
        parts = relative.split("/")
        if any(settings.excluded(name) for name in parts):
            return ()
        try:
            if any(root.joinpath(*parts[:i]).is_symlink() for i in range(1, len(parts))):
                return ()  # under a symlinked folder, which a scan never enters
            mode = (root / relative).lstat().st_mode
        except (FileNotFoundError, NotADirectoryError):
            return ()  # gone: what the ledger holds under it is removed
        except OSError:
            unreadable.append(relative)  # e.g. a parent folder it may not look into
            return ()
        if S_ISDIR(mode):
            return walk(root / relative)
        if S_ISLNK(mode) and (root / relative).is_dir():
            return ()  # a symlinked folder: never entered
        return (source_file(str(root / relative), relative, parts[-1]),)

    tops = ("",) if scope is None else scope
    found = [source for top in tops for source in look_at(top) if source is not None]
    return Scan(tuple(sorted(found, key=lambda f: f.doc_id)), tuple(sorted(unreadable)), scope)


# A failed file whose bytes did not change (nor the pipeline) is tried again by the next run
# after its first failure, then once RETRY_BACKOFF has passed since its last attempt, twice as
# long after each further failure, at most RETRY_BACKOFF_MAX apart: a file that stays broken
# is read again after 1, 2, 4, 8 and 16 hours, then once a day, not by every run. A file whose
# bytes changed is tried at once; `--retry-failed` tries every failed file now.
RETRY_BACKOFF = timedelta(hours=1)
RETRY_BACKOFF_MAX = timedelta(days=1)


def retry_delay(attempts: int) -> timedelta:
    """How long after its last attempt a failed file whose bytes did not change waits for
    the next one, after `attempts` failed attempts in a row (see RETRY_BACKOFF)."""
    if attempts <= 1:
        return timedelta(0)
    return min(RETRY_BACKOFF * 2 ** min(attempts - 2, 16), RETRY_BACKOFF_MAX)


class RetrySettings(Settings):
    """When a run tries failed files again (RETRY_BACKOFF)."""

    retry_failed: bool = option(
        False,
        "try every failed file again now; without it, a failed file whose bytes did not change "
        "is tried by the next run, then after 1, 2, 4, ... hours (at most a day apart)",
    )


@dataclass(frozen=True)
class Waiting:
    """A failed file that a run does not try: its bytes and the pipeline are as they were when
    it last failed, and its back-off has not passed."""

    source: SourceFile
    reason: Reason | None  # why it failed last
    attempts: int  # failed attempts in a row
    due_us: int  # from when a run tries it again (µs since the epoch)


@dataclass(frozen=True)
class Plan:
    """What a run does: index these files, leave those alone, remove the vanished ones."""

    to_index: tuple[SourceFile, ...]
    unchanged: tuple[SourceFile, ...]
    removed: tuple[str, ...]  # doc_ids in the ledger that are no longer on disk
    kept_unseen: tuple[str, ...] = ()  # not seen, but under a folder that could not be listed
    unreadable_dirs: tuple[str, ...] = ()  # folders the scan could not list
    touched: tuple[SourceFile, ...] = ()  # unchanged bytes, but another size, mtime or ETag
    scope: tuple[str, ...] | None = None  # the paths the scan was restricted to; None: all
    waiting: tuple[Waiting, ...] = ()  # failed files not tried before their back-off passed

    @property
    def changes(self) -> bool:
        """Whether the run has anything to write."""
        return bool(self.to_index or self.removed or self.touched)

    @property
    def files_seen(self) -> int:
        return len(self.to_index) + len(self.unchanged) + len(self.waiting)

    def describe(self) -> str:
        """One line for the run log."""
        restricted = "" if self.scope is None else f" (scan restricted to {len(self.scope)} paths)"
        waiting = f", {len(self.waiting)} failed waiting for their retry" if self.waiting else ""
        return (
            f"{self.files_seen} files{restricted}: {len(self.to_index)} to index, "
            f"{len(self.unchanged)} unchanged{waiting}, {len(self.removed)} removed; "
            f"unreadable folders: {', '.join(self.unreadable_dirs) or 'none'}"
        )


def plan_changes(
    scan: Scan,
    ledger: Mapping[str, LedgerEntry],
    fingerprint: str,
    retry: frozenset[Reason] = frozenset(),
    retry_failed: bool = False,
    now_us: int | None = None,
) -> Plan:
    """Diff a completed scan against the ledger by content hash.

    A file is unchanged when its bytes, the pipeline fingerprint and a successful status all
    match the ledger; documents left empty for one of the `retry` reasons (`ocr_off` when this
    run has OCR on) are tried again, and so are failed ones, but a failed file whose bytes and
    pipeline are as they were waits until its back-off has passed (`retry_delay` after its
    last attempt, as of `now_us`, default now), unless `retry_failed`. An unchanged file whose
    size, mtime or ETag differ from the ledger's is also `touched` (its new ones are
    recorded). A ledger entry missing from the scan is removed only if the scan looked where
    it was (its `scope`, when restricted) and no unreadable folder could be hiding it.
    """
    now_us = time.time_ns() // 1000 if now_us is None else now_us
    to_index: list[SourceFile] = []
    unchanged: list[SourceFile] = []
    touched: list[SourceFile] = []
    waiting: list[Waiting] = []
    for source in scan.files:
        entry = ledger.get(source.doc_id)
        if entry is None:
            to_index.append(source)
            continue
        as_before = (
            entry.content_hash == source.content_hash and entry.pipeline_fingerprint == fingerprint
        )
        if as_before and entry.status == Status.FAILED and not retry_failed:
            due_us = entry.recorded_us + retry_delay(entry.attempts) // timedelta(microseconds=1)
            if now_us < due_us:
                waiting.append(Waiting(source, entry.reason, entry.attempts, due_us))
                continue
        same = (
            as_before
            and source.content_hash != ""
            and entry.status != Status.FAILED
            and entry.reason not in retry
        )
        (unchanged if same else to_index).append(source)
        recorded = (entry.size, entry.mtime_us, entry.etag)
        if same and recorded != (source.size, source.mtime_us, source.etag):  # same bytes
            touched.append(source)
    seen = {source.doc_id for source in scan.files}
    scope = frozenset(("",) if scan.scope is None else scan.scope)
    unseen = sorted(d for d in ledger if d not in seen and in_scope(d, scope))
    hidden = {d for d in unseen if any(is_under(d, folder) for folder in scan.unreadable_dirs)}
    removed = [d for d in unseen if d not in hidden]
    return Plan(
        tuple(to_index),
        tuple(unchanged),
        tuple(removed),
        tuple(sorted(hidden)),
        scan.unreadable_dirs,
        tuple(touched),
        scan.scope,
        tuple(waiting),
    )


def plan_run(
    root: str | Path,
    ledger: Mapping[str, LedgerEntry],
    settings: ScanSettings,
    fingerprint: str,
    retry: frozenset[Reason] = frozenset(),
    retry_failed: bool = False,
) -> Plan:
    """Scan `root` (hashing only files whose size or mtime changed) and diff it against the
    ledger: the plan of a run."""
    scan = discover(root, ledger, settings)
    return plan_changes(scan, ledger, fingerprint, retry, retry_failed)
