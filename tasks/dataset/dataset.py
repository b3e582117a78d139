"""One LanceDB dataset, opened once and handed down: its ledger, writes, upkeep, tags, search.

A `Dataset` holds one connection (with the storage options of an object store) and the two
tables, so everything that must stay consistent between them lives here: a batch replaces
its documents' chunks in one commit before the ledger says so; a failed document keeps its
last good chunks; runs on one dataset take turns on a lock; upkeep keeps versions bounded
while the newest run tags stay restorable.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import lancedb
import numpy as np
from filelock import FileLock, Timeout
from lancedb.index import FTS
from lancedb.query import MatchQuery
from lancedb.table import Table

from tasks.core import faults
from tasks.core.reasons import Reason, Status
from tasks.core.records import Chunk, Document, LedgerEntry
from tasks.dataset.ann import refresh_vector_index, tune
from tasks.dataset.location import DatasetError, connect, lock_file
from tasks.dataset.schema import (
    CHUNKS_TABLE,
    DOCUMENTS_SCHEMA,
    DOCUMENTS_TABLE,
    EPOCH,
    SCHEMA_VERSION,
    SEARCH_TEXT_COLUMN,
    VECTOR_COLUMN,
    Fingerprint,
    chunk_rows,
    chunks_schema,
    document_rows,
    now,
    stored_fingerprint,
)
from tasks.dataset.sql import sql_in
from tasks.text import analysis

# Scalar indexes created with the tables, before any merge keyed on them.
KEY_INDEXES = {CHUNKS_TABLE: ("chunk_id", "doc_id", "text_hash"), DOCUMENTS_TABLE: ("doc_id",)}
# The full-text index: on the analysed text, split at whitespace only (the analysis is done
# by tasks.text.analysis); no token-length cap, since the analyser bounds its terms.
FULL_TEXT_INDEX = FTS(
    base_tokenizer="whitespace",
    lower_case=False,
    stem=False,
    remove_stop_words=False,
    ascii_folding=False,
    with_position=False,
    max_token_length=None,
)
RUN_TAG_PREFIX = "run-"
KEEP_RUN_TAGS = 10  # versions older than the oldest kept run tag are cleaned up
MIN_VERSION_AGE = timedelta(minutes=1)  # never clean up versions a reader may just have opened
Logger = logging.Logger | logging.LoggerAdapter


class Dataset:
    """The dataset at `uri`: open it once per run (or per service) and pass it down.

    With `consistency` set, open tables check for newer versions at most that often, so a
    long-lived reader (the search service) sees what later runs commit.
    """

    def __init__(self, uri: str, consistency: timedelta | None = None):
        self.uri = uri
        self._consistency = consistency
        self._follows_writers = consistency is not None
        self._connection: lancedb.DBConnection | None = None
        self._tables: dict[str, Table] = {}
        self._fingerprint: Fingerprint | None = None  # known once prepared or read

    # -- the tables -------------------------------------------------------------------------

    @property
    def _db(self) -> lancedb.DBConnection:
        """The connection, made on first use (taking the lock needs none)."""
        if self._connection is None:
            self._connection = connect(self.uri, self._consistency)
        return self._connection

    def _table(self, name: str) -> Table:
        if name not in self._tables:
            self._tables[name] = self._db.open_table(name)
        return self._tables[name]

    @property
    def chunks(self) -> Table:
        return self._table(CHUNKS_TABLE)

    @property
    def documents(self) -> Table:
        return self._table(DOCUMENTS_TABLE)

    def exists(self) -> bool:
        """Whether the dataset has a chunks table (a store that cannot be reached raises)."""
        return CHUNKS_TABLE in self._db.table_names()

    @property
    def fingerprint(self) -> Fingerprint:
        """How the dataset was built; DatasetError when there is no dataset to search."""
        if self._fingerprint is not None and not self._follows_writers:
            return self._fingerprint
        if not self.exists():
            raise DatasetError(
                f"no index at {self.uri}: run `python -m flows.ingest DIR --index {self.uri}` first"
            )
        fp = stored_fingerprint(self.chunks.schema)
        if fp is None:
            raise DatasetError(f"{self.uri} has a chunks table that doc-indexer did not create")
        if fp.schema_version != SCHEMA_VERSION:
            raise DatasetError(
                f"{self.uri} was built by an older doc-indexer (dataset layout "
                f"{fp.schema_version}, now {SCHEMA_VERSION}); re-index it with "
                f"`python -m flows.ingest DIR --index {self.uri} --rebuild`"
            )
        self._fingerprint = fp
        return fp

    def prepare(self, fp: Fingerprint, rebuild: bool = False) -> None:
        """Create the tables if needed; refuse a dataset built with another fingerprint.

        With `rebuild`, existing tables are dropped first and everything is indexed again.
        """
        existing = set(self._db.table_names())
        if rebuild:
            for name in existing & {CHUNKS_TABLE, DOCUMENTS_TABLE}:
                self._db.drop_table(name)
            existing -= {CHUNKS_TABLE, DOCUMENTS_TABLE}
            self._tables.clear()
        self._fingerprint = None
        if CHUNKS_TABLE in existing:
            stored = stored_fingerprint(self.chunks.schema)
            if stored != fp:
                built = stored.describe() if stored else "no recorded fingerprint"
                raise DatasetError(
                    f"dataset {self.uri} was built with {built}; this run uses "
                    f"{fp.describe()}: the rows would not be comparable. Re-run with --rebuild "
                    "to re-index everything with the new settings, or pass --index to write "
                    "a new dataset."
                )
        else:
            self._db.create_table(CHUNKS_TABLE, schema=chunks_schema(fp))
        if DOCUMENTS_TABLE not in existing:
            self._db.create_table(DOCUMENTS_TABLE, schema=DOCUMENTS_SCHEMA)
        for name, schema in (
            (CHUNKS_TABLE, chunks_schema(fp)),
            (DOCUMENTS_TABLE, DOCUMENTS_SCHEMA),
        ):
            missing = [f for f in schema.names if f not in self._table(name).schema.names]
            if missing:  # made by a build of this layout from before those columns were added
                raise DatasetError(
                    f"dataset {self.uri} has no {', '.join(missing)} column(s) in its {name} "
                    "table: it was built before this version's layout was complete. Re-run "
                    "with --rebuild to re-index everything, or pass --index to write a new "
                    "dataset."
                )
        for name, keys in KEY_INDEXES.items():
            table = self._table(name)
            indexed = {column for index in table.list_indices() for column in index.columns}
            for key in keys:
                if key not in indexed:
                    table.create_scalar_index(key, index_type="BTREE")
        self._fingerprint = fp

    def indexed_columns(self) -> set[str]:
        """Columns of the chunks table that have an index."""
        return {column for index in self.chunks.list_indices() for column in index.columns}

    # -- the ledger -------------------------------------------------------------------------

    def ledger(self) -> dict[str, LedgerEntry]:
        """doc_id → what the documents table records about it."""
        columns = [
            "doc_id", "content_hash", "status", "reason", "pipeline_fingerprint", "size", "mtime"
        ]  # fmt: skip
        rows = self.documents.to_arrow().select(columns).to_pylist()
        return {
            row["doc_id"]: LedgerEntry(
                content_hash=row["content_hash"],
                status=Status(row["status"]),
                pipeline_fingerprint=row["pipeline_fingerprint"],
                size=row["size"],
                mtime_us=(row["mtime"] - EPOCH) // timedelta(microseconds=1),
                reason=Reason.of(row["reason"]) if row["reason"] else None,
            )
            for row in rows
        }

    def stored_vectors(self, text_hashes: list[str]) -> dict[str, np.ndarray]:
        """Vectors already stored for these chunk text hashes (same model: the fingerprint)."""
        wanted = sorted(set(text_hashes))
        if not wanted:
            return {}
        found = (
            self.chunks.search()
            .where(sql_in("text_hash", wanted))
            .select(["text_hash", VECTOR_COLUMN])
            .limit(None)
            .to_arrow()
        )
        vectors = found.column(VECTOR_COLUMN).combine_chunks().flatten().to_numpy()
        vectors = vectors.reshape(found.num_rows, -1) if found.num_rows else vectors
        return dict(zip(found.column("text_hash").to_pylist(), vectors, strict=True))

    # -- writes -----------------------------------------------------------------------------

    def write_batch(
        self, documents: list[Document], chunks: list[Chunk], vectors: np.ndarray
    ) -> None:
        """Replace the chunk sets of a batch of documents in one commit, then update the ledger.

        Indexed and empty documents get exactly the chunks given (their old chunks are deleted
        in the same merge). A failed document keeps its previous chunks, so a bad re-index
        never removes the last good version. The ledger is written after the chunks, so it
        never claims chunks that are not in the table.
        """
        faults.maybe_fail("write")
        fp = self.fingerprint
        at = now()
        replaced = [doc.doc_id for doc in documents if doc.status != Status.FAILED]
        if replaced:
            (
                self.chunks.merge_insert("chunk_id")
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .when_not_matched_by_source_delete(sql_in("doc_id", replaced))
                .execute(chunk_rows(documents, chunks, vectors, fp, at))
            )
        faults.maybe_crash("write")  # between the chunks commit and the ledger commit
        if documents:
            self._record(documents, chunks, fp, at)

    def record_failed(self, documents: list[Document]) -> None:
        """Mark documents failed in the ledger only; their old chunks stay searchable."""
        self._record(documents, [], self.fingerprint, now())

    def _record(
        self, documents: list[Document], chunks: list[Chunk], fp: Fingerprint, at: datetime
    ) -> None:
        n_chunks: dict[str, int] = {}
        for chunk in chunks:
            n_chunks[chunk.doc_id] = n_chunks.get(chunk.doc_id, 0) + 1
        previous = (
            self.documents.search()
            .where(sql_in("doc_id", [doc.doc_id for doc in documents]))
            .select(["doc_id", "attempts"])
            .to_arrow()
            .to_pylist()
        )
        attempts = {row["doc_id"]: row["attempts"] or 0 for row in previous}
        (
            self.documents.merge_insert("doc_id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute(document_rows(documents, n_chunks, attempts, fp, at))
        )

    def delete(self, doc_ids: list[str]) -> int:
        """Remove documents and their chunks; returns the number of chunks deleted."""
        if not doc_ids:
            return 0
        condition = sql_in("doc_id", list(doc_ids))
        before = self.chunks.count_rows()
        self.chunks.delete(condition)
        self.documents.delete(condition)
        return before - self.chunks.count_rows()

    # -- upkeep, tags, restore --------------------------------------------------------------

    def finalize(self, run_tag: str) -> int:
        """Full-text index, compaction, old-version cleanup, and a tag on the version produced.

        Cleanup keeps every version a kept run tag points at (the newest KEEP_RUN_TAGS runs)
        and everything younger than MIN_VERSION_AGE, so versions and data files stay bounded
        while the last runs can still be restored. Returns the chunks table version a reader
        now sees.
        """
        chunks = self.chunks
        if chunks.count_rows() > 0 and SEARCH_TEXT_COLUMN not in self.indexed_columns():
            chunks.create_index(SEARCH_TEXT_COLUMN, config=FULL_TEXT_INDEX)
        refresh_vector_index(chunks)  # an ANN index once the table is big enough
        for table in (chunks, self.documents):
            tags = sorted(t for t in table.tags.list() if t.startswith(RUN_TAG_PREFIX))
            for old in tags[: max(0, len(tags) - (KEEP_RUN_TAGS - 1))]:
                table.tags.delete(old)
            # Compact and update indexes first, sparing everything near the oldest tag; the
            # second pass has nothing to compact, so its cutoff lands right before the oldest
            # tagged version.
            table.optimize(cleanup_older_than=_cleanup_age(table, margin=timedelta(hours=1)))
            _clean_up_to_oldest_tag(table)
            table.tags.create(run_tag, table.version)
        return self.chunks.version

    def is_finalized(self) -> bool:
        """Whether the newest run tag still points at the current version of both tables:
        nothing was committed since the last finalize (a crashed run leaves it False)."""
        for table in (self.chunks, self.documents):
            tags = table.tags.list()
            runs = sorted(name for name in tags if name.startswith(RUN_TAG_PREFIX))
            if not runs or tags[runs[-1]]["version"] != table.version:
                return False
        return True

    def run_tags(self) -> dict[str, int]:
        """Run tag → chunks table version, oldest first."""
        self.fingerprint  # noqa: B018 - a clear DatasetError for a missing dataset
        tags = self.chunks.tags.list()
        return {name: tags[name]["version"] for name in sorted(tags)}

    def restore(self, tag: str) -> int:
        """Make the tagged versions of both tables the current ones (a new commit each).

        Returns the new chunks table version.
        """
        self.fingerprint  # noqa: B018 - a clear DatasetError for a missing dataset
        for table in (self.chunks, self.documents):
            if tag not in table.tags.list():
                known = ", ".join(sorted(table.tags.list())) or "none"
                raise DatasetError(f"no tag {tag!r} in {self.uri} (run tags: {known})")
            table.checkout(tag)
            table.restore()
        self._tables.clear()
        self._fingerprint = None
        return self.chunks.version

    @contextmanager
    def lock(self, timeout: float, logger: Logger) -> Iterator[None]:
        """Hold the dataset's ingest lock: a second run waits for the first, visibly.

        See `tasks.dataset.location.lock_file` for where the lock lives; for an object-store
        dataset it only keeps apart runs on this machine (the deployment's concurrency limit
        does the rest).
        """
        path = lock_file(self.uri)
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(path))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            logger.warning("another ingest run holds %s; waiting up to %.0f s", path, timeout)
            try:
                lock.acquire(timeout=timeout)
            except Timeout:
                raise DatasetError(
                    f"another ingest run is still writing {self.uri} after {timeout:.0f} s; "
                    "try later"
                ) from None
        try:
            yield
        finally:
            lock.release()

    # -- search primitives ------------------------------------------------------------------

    def nearest(
        self, vector: np.ndarray, columns: list[str], where: str | None, limit: int
    ) -> list[dict[str, Any]]:
        """Up to `limit` rows nearest to `vector` by cosine distance (`_distance`).

        Exact below the ANN threshold, the tuned IVF index above it. A selective prefilter
        can leave the probed index lists short of `limit` rows; then the same query runs as
        an exact scan of the filtered rows instead.
        """
        query: Any = self.chunks.search(vector, vector_column_name=VECTOR_COLUMN)
        query = tune(query.distance_type("cosine").select([*columns, "_distance"]).limit(limit))
        if where is not None:
            query = query.where(where, prefilter=True)
        rows = query.to_list()
        if where is not None and len(rows) < limit and VECTOR_COLUMN in self.indexed_columns():
            rows = query.bypass_vector_index().to_list()
        return rows

    def matching(
        self, text: str, columns: list[str], where: str | None, limit: int
    ) -> list[dict[str, Any]]:
        """Up to `limit` rows by BM25 relevance (`_score`) to `text` in the full-text index:
        the question analysed as the chunks were, any of its terms (no query syntax)."""
        terms = analysis.query_text(text)
        if not terms:
            return []
        # Any of the terms, exact (MatchQuery's defaults; its pydantic fields hide them from mypy).
        match = MatchQuery(terms, SEARCH_TEXT_COLUMN)  # type: ignore[call-arg]
        query = self.chunks.search(match, query_type="fts")
        query = query.select([*columns, "_score"]).limit(limit)
        if where is not None:
            query = query.where(where, prefilter=True)
        return query.to_list()


# Margins between the cleanup cutoff and the oldest tagged version, tried in turn. The cutoff
# is computed from this process's clock just before the call; on a busy machine the call can
# start late enough for it to pass the oldest tagged version, which LanceDB refuses.
_TAG_MARGINS = (timedelta(seconds=0.5), timedelta(seconds=5), timedelta(minutes=1))


def _clean_up_to_oldest_tag(table: Table) -> None:
    """Remove the versions older than the oldest tagged one (and than MIN_VERSION_AGE)."""
    for margin in _TAG_MARGINS:
        try:
            table.optimize(cleanup_older_than=_cleanup_age(table, margin))
            return
        except RuntimeError as exc:
            if "tagged version" not in str(exc) or margin == _TAG_MARGINS[-1]:
                raise


def _cleanup_age(table: Table, margin: timedelta) -> timedelta:
    """Age beyond which versions can go without touching a tagged one (or a very new one)."""
    tagged = {info["version"] for info in table.tags.list().values()}
    stamps = [v["timestamp"] for v in table.list_versions() if v["version"] in tagged]
    if not stamps:
        return MIN_VERSION_AGE
    # Version timestamps are naive; take the later reading of "now" so the margin only grows.
    reference = max(datetime.now(), datetime.now(UTC).replace(tzinfo=None))
    return max(MIN_VERSION_AGE, reference - min(stamps) + margin)
