# Over 300 lines: the listing, the copies it downloads and the loads that read them are one scheme.
"""Documents in an object store (`s3://bucket/prefix`, `gs://…`, `az://…`), scanned as a folder is.

The listing is streamed page by page and diffed against the ledger like a folder's files: an
object's doc_id is its key relative to the prefix, its size, last-modified time and ETag are
the fast path (an object whose listing matches its ledger entry keeps the recorded hash and is
not read); any other object is downloaded once, into this process's folder of copies, and hashed
while it downloads. A copy is named by its content hash, so the load step on the same machine
reads it instead of the store (`load_objects`); a load step on a machine that did not plan the
run (a remote Dask worker) finds no copy and fetches its objects itself. The ingest flow
discards a run's copies when it ends; the folder goes when the process exits.

A SourceFile of an object keeps the object's URL as its path (what the ledger records). The
store is opened with the settings LanceDB takes (tasks/dataset/object_store.py).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Protocol

from tasks.core.reasons import Reason
from tasks.core.records import Document, LedgerEntry, SourceFile
from tasks.dataset.location import DatasetError, local_path
from tasks.dataset.object_store import is_object_url, open_store
from tasks.parse.formats import MIME_TYPES

if TYPE_CHECKING:
    from obstore import ObjectMeta
    from obstore.store import ObjectStore

FETCHERS = 16  # objects downloaded at once while planning (each one GET; I/O, not CPU)
LIST_PAGE = 1000  # objects per listing page (S3's own page size)
READ_BLOCK = 1 << 20  # bytes per chunk of a download
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def resolve_source(source: str) -> str:
    """The source as a run records it: an object URL without a trailing slash, or the
    absolute path of a local folder (`file://` URIs included)."""
    if is_object_url(source):
        return source.rstrip("/")
    return str(Path(local_path(source) or source).resolve())


def error_line(exc: BaseException) -> str:
    """An object store's error as one line: its first line without the XML body, plus the
    error code the body names (NoSuchBucket, AccessDenied, InvalidObjectState, ...)."""
    text = str(exc)
    head = text.split("<?xml", 1)[0].strip()
    first = head.splitlines()[0].strip() if head else type(exc).__name__
    code = re.search(r"<Code>([^<]+)</Code>", text)
    return f"{first.rstrip(': ')}: {code.group(1)}" if code else first


def check_source(source: str) -> None:
    """A DatasetError naming the URL when the object store at `source` cannot be listed (no
    such bucket, wrong endpoint or credentials); nothing for a local folder. One request."""
    if not is_object_url(source):
        return
    import obstore

    store = open_store(source)
    try:
        next(iter(obstore.list(store, chunk_size=1)), None)
    except Exception as exc:  # noqa: BLE001 - any failure to list is the store's
        raise DatasetError(f"cannot list the documents at {source}: {error_line(exc)}") from None


def holds_a_document(source: str) -> bool:
    """Whether any object under `source` has a supported suffix (stops at the first one)."""
    import obstore

    for page in obstore.list(open_store(source), chunk_size=LIST_PAGE):
        if any(_mime(meta["path"]) for meta in page):
            return True
    return False


def _mime(key: str) -> str | None:
    return MIME_TYPES.get(PurePosixPath(key).suffix.lower())


def _mtime_us(meta: ObjectMeta) -> int:
    return (meta["last_modified"] - _EPOCH) // timedelta(microseconds=1)


class ObjectCopies:
    """This process's downloaded objects: one file per content hash, in a temporary folder.

    `hash_of` downloads an object (as the listing describes it) at most once, however many
    planners ask at once (the warm-up's preview and the run itself); `copy_of` finds the
    copy of some bytes by their hash; `discard` deletes copies a run no longer needs.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._folder: Path | None = None
        self._hashes: dict[tuple[str, int, int, str], Future[str]] = {}

    def folder(self) -> Path:
        with self._lock:
            if self._folder is None:
                self._folder = Path(tempfile.mkdtemp(prefix="doc-indexer-objects-"))
                atexit.register(shutil.rmtree, self._folder, ignore_errors=True)
            return self._folder

    def hash_of(self, store: ObjectStore, url: str, key: str, meta: ObjectMeta) -> str:
        """The sha256 of the object `key` of `store`, downloaded into a copy unless this
        process already has it for the same listing (URL, size, last-modified, ETag)."""
        listed = (url, meta["size"], _mtime_us(meta), meta.get("e_tag") or "")
        with self._lock:
            pending = self._hashes.get(listed)
            mine = pending is None
            if pending is None:
                pending = self._hashes[listed] = Future()
        if not mine:
            return pending.result()
        try:
            digest = self.download(store, key)
        except BaseException as exc:
            with self._lock:
                del self._hashes[listed]
            pending.set_exception(exc)
            raise
        pending.set_result(digest)
        return digest

    def download(self, store: ObjectStore, key: str) -> str:
        """Download one object into a copy named by its sha256, hashing it on the way."""
        import obstore

        folder = self.folder()
        digest = hashlib.sha256()
        handle, partial = tempfile.mkstemp(dir=folder, suffix=".part")
        try:
            with os.fdopen(handle, "wb") as out:
                for block in obstore.get(store, key).stream(READ_BLOCK):
                    digest.update(block)
                    out.write(block)
            os.replace(partial, folder / digest.hexdigest())
        except BaseException:
            Path(partial).unlink(missing_ok=True)
            raise
        return digest.hexdigest()

    def copy_of(self, content_hash: str) -> Path | None:
        """The local copy of the bytes with this hash, if this process has one."""
        if not content_hash or self._folder is None:
            return None
        path = self._folder / content_hash
        return path if path.is_file() else None

    def discard_all(self) -> None:
        """Delete every copy (an audit's: it hashed every object)."""
        with self._lock:
            hashes = [p.result() for p in self._hashes.values() if p.done() and not p.exception()]
        self.discard(hashes)

    def discard(self, hashes: Iterable[str]) -> None:
        """Delete the copies of these hashes (and forget which listings they came from)."""
        gone = set(hashes)
        with self._lock:
            for listed, pending in list(self._hashes.items()):
                if pending.done() and pending.exception() is None and pending.result() in gone:
                    del self._hashes[listed]
            folder = self._folder
        if folder is not None:
            for content_hash in gone:
                if content_hash:
                    (folder / content_hash).unlink(missing_ok=True)


COPIES = ObjectCopies()


def discard_copies(files: Iterable[SourceFile]) -> None:
    """Delete this process's copies of these objects (a run's, when it ends)."""
    COPIES.discard(source.content_hash for source in files if is_object_url(source.path))


class ScanRules(Protocol):
    """Which objects a scan takes (tasks/ingest/discover.py's ScanSettings)."""

    def excluded(self, name: str) -> bool: ...

    def included(self, doc_id: str) -> bool: ...


def list_objects(
    url: str,
    known: Mapping[str, LedgerEntry],
    scope: Sequence[str] | None,
    rules: ScanRules,
) -> tuple[SourceFile, ...]:
    """Every supported object under `url` that the rules select, hashed, sorted by doc_id: the
    object-store side of tasks/ingest/discover.py's `discover` (which gives its ScanSettings
    as the `rules`, and the `scope` of paths to look at; None: all).

    An object whose size, last-modified time and ETag match its ledger entry (`_same_listing`)
    keeps the recorded hash unread; the others are downloaded (FETCHERS at once) and hashed.
    One that cannot be read gets an empty hash, so the load step tries it again and records
    why; one deleted since the listing is not there. A listing that fails is a DatasetError
    naming the URL: a partial listing would take every unlisted document as deleted.
    """
    import obstore

    url = url.rstrip("/")
    store = open_store(url)
    found: dict[str, SourceFile] = {}
    to_hash: list[tuple[str, ObjectMeta]] = []

    def take(meta: ObjectMeta) -> None:
        doc_id = meta["path"]
        mime = _mime(doc_id)
        if mime is None or doc_id in found or any(rules.excluded(p) for p in doc_id.split("/")):
            return
        if not rules.included(doc_id):
            return
        entry = known.get(doc_id)
        size, mtime_us, etag = meta["size"], _mtime_us(meta), meta.get("e_tag") or ""
        unchanged = entry is not None and _same_listing(entry, size, mtime_us, etag)
        content_hash = entry.content_hash if entry is not None and unchanged else ""
        url_of = f"{url}/{doc_id}"
        found[doc_id] = SourceFile(doc_id, url_of, size, mtime_us, content_hash, mime, etag)
        if not unchanged:
            to_hash.append((doc_id, meta))

    try:
        for top in ("",) if scope is None else scope:
            if top:  # a path given: the object of that name, and those under it as a folder
                try:
                    take(obstore.head(store, top))
                except FileNotFoundError:
                    pass
            for page in obstore.list(store, prefix=top or None, chunk_size=LIST_PAGE):
                for meta in page:
                    take(meta)
    except Exception as exc:  # noqa: BLE001 - any failure to list is the store's
        raise DatasetError(f"cannot list the documents at {url}: {error_line(exc)}") from None

    def hashed(item: tuple[str, ObjectMeta]) -> tuple[str, str | None]:
        doc_id, meta = item
        try:
            return doc_id, COPIES.hash_of(store, found[doc_id].path, doc_id, meta)
        except FileNotFoundError:
            return doc_id, None  # deleted since the listing: it is not there
        except Exception:  # noqa: BLE001 - unreadable: the load step records the reason
            return doc_id, ""

    with ThreadPoolExecutor(FETCHERS, thread_name_prefix="fetch") as pool:
        for doc_id, content_hash in pool.map(hashed, to_hash):
            if content_hash is None:
                del found[doc_id]
            else:
                found[doc_id] = replace(found[doc_id], content_hash=content_hash)
    return tuple(found[doc_id] for doc_id in sorted(found))


def _same_listing(entry: LedgerEntry, size: int, mtime_us: int, etag: str) -> bool:
    """Whether an object is listed as the ledger recorded it: the same size and last-modified
    time (to the second, on S3) and, where both have one, the same ETag, which an object
    rewritten within that second does not keep. A ledger without the ETag (a dataset from
    before it was recorded) compares as before; the run records it (Plan.touched)."""
    same_etag = not (entry.etag and etag) or entry.etag == etag
    return (entry.size, entry.mtime_us) == (size, mtime_us) and same_etag


def needs_copies(sources: Sequence[SourceFile], max_file_mb: float) -> bool:
    """Whether a batch holds objects to read (not over the size limit: those are never read)."""
    limit = max_file_mb * 2**20
    return any(is_object_url(source.path) and source.size <= limit for source in sources)


def load_objects(
    sources: list[SourceFile],
    max_file_mb: float,
    load_local: Callable[[list[SourceFile]], list[Document]],
) -> list[Document]:
    """Load a batch whose files are objects: each from this process's copy when it planned
    the run, else fetched here into a temporary copy (deleted once loaded); `load_local`
    loads the copies as files. An object that cannot be fetched is failed with its reason.
    The documents keep the objects' URLs as their paths."""
    limit = max_file_mb * 2**20
    fetched: list[str] = []
    failed: dict[str, Document] = {}
    readable: list[SourceFile] = []
    for source in sources:
        if not is_object_url(source.path) or source.size > limit:
            readable.append(source)  # a file, or an object the load step fails unread
            continue
        copy = COPIES.copy_of(source.content_hash)
        if copy is None:
            try:
                content_hash = _fetch(source)
            except FileNotFoundError:
                failed[source.doc_id] = Document.not_indexed(
                    source, Reason.VANISHED, "deleted from the store after the run listed it"
                )
                continue
            except Exception as exc:  # noqa: BLE001 - this object's failure, recorded
                failed[source.doc_id] = Document.not_indexed(
                    source, Reason.UNREADABLE, error_line(exc)
                )
                continue
            fetched.append(content_hash)
            copy = COPIES.copy_of(content_hash)
        readable.append(replace(source, path=str(copy)) if copy else source)
    try:
        loaded = {doc.doc_id: doc for doc in load_local(readable)}
    finally:
        COPIES.discard(fetched)
    urls = {source.doc_id: source.path for source in sources}
    loaded.update(failed)
    return [
        replace(doc, source=replace(doc.source, path=urls[doc.doc_id]))
        for doc in (loaded[source.doc_id] for source in sources)
    ]


def _fetch(source: SourceFile) -> str:
    """Download the object at `source.path` into a copy; its sha256 (the load step compares
    it with the planned hash, as it does for a file that changed after the scan)."""
    root = source.path[: -len(source.doc_id)].rstrip("/")
    return COPIES.download(open_store(root), source.doc_id)
