# Over 300 lines: what keeps the two tables consistent is decided in one class.
"""One LanceDB dataset, opened once and handed down: `Dataset` holds the connection and both tables.

What must stay consistent between the two tables is decided here; the work on each is done
by its module:

- `ledger`: the documents table (what the last run did with each file);
- `chunk_store`: the chunks table (chunk sets, stored vectors, deletes, the two searches);
- `upkeep`: indexes, compaction, old-version cleanup, run tags, restore;
- `lock`: the ingest lock that makes runs on one dataset take turns.

A batch replaces its documents' chunks in one commit before the ledger says so; a failed
document keeps its last good chunks; upkeep keeps versions bounded while the newest run tags
stay restorable.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any

import lancedb
import numpy as np
from lancedb.table import Table

from tasks.core import faults
from tasks.core.records import Chunk, Document, LedgerEntry, SourceFile
from tasks.dataset import chunk_store, ledger, upkeep, vocabulary
from tasks.dataset.location import DatasetError, connect
from tasks.dataset.lock import Logger, ingest_lock
from tasks.dataset.schema import (
    ADDED_COLUMNS,
    CHUNKS_TABLE,
    DOCUMENTS_SCHEMA,
    DOCUMENTS_TABLE,
    FILLED_LATER_COLUMNS,
    METADATA_UNREAD,
    SCHEMA_VERSION,
    VECTOR_COLUMN,
    Fingerprint,
    chunks_schema,
    now,
    stored_fingerprint,
)
from tasks.dataset.vocabulary import Vocabulary


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
        # Whether writes may append: the run started on an empty chunks table and no write
        # has failed since; and the documents written since (see `write_batch`).
        self._appending = False
        self._written: set[str] = set()

    # -- the tables and how they were built -------------------------------------------------

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

    def built_with(self) -> str | None:
        """The model id the dataset's fingerprint records, whatever its layout; None where
        there is no dataset yet (or one doc-indexer did not make)."""
        if not self.exists():
            return None
        stored = stored_fingerprint(self.chunks.schema)
        return stored.model if stored else None

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
            self._refuse_another_fingerprint(fp)
        else:
            self._db.create_table(CHUNKS_TABLE, schema=chunks_schema(fp))
        if DOCUMENTS_TABLE not in existing:
            self._db.create_table(DOCUMENTS_TABLE, schema=DOCUMENTS_SCHEMA)
        self._refuse_missing_columns(fp)
        for name in upkeep.KEY_INDEXES:
            upkeep.create_key_indexes(self._table(name))
        self._fingerprint = fp
        self._appending, self._written = self.chunks.count_rows() == 0, set()

    def _refuse_another_fingerprint(self, fp: Fingerprint) -> None:
        stored = stored_fingerprint(self.chunks.schema)
        if stored != fp:
            built = stored.describe() if stored else "no recorded fingerprint"
            raise DatasetError(
                f"dataset {self.uri} was built with {built}; this run uses "
                f"{fp.describe()}: the rows would not be comparable. Re-run with --rebuild "
                "to re-index everything with the new settings, or pass --index to write "
                "a new dataset."
            )

    def _refuse_missing_columns(self, fp: Fingerprint) -> None:
        self._add_metadata_columns(fp)
        self._add_filled_later_columns(fp)
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

    def _add_metadata_columns(self, fp: Fingerprint) -> None:
        """Give a dataset made before document metadata was read the columns it lacks (empty),
        and mark every document it holds to be read again by this run (stored vectors are
        reused: only the reading is done again), so that each gets its metadata. Marked
        first: a run stopped in between marks them again."""
        schemas = {CHUNKS_TABLE: chunks_schema(fp), DOCUMENTS_TABLE: DOCUMENTS_SCHEMA}
        missing = {
            name: [
                schemas[name].field(column)
                for column in columns
                if column not in self._table(name).schema.names
            ]
            for name, columns in ADDED_COLUMNS.items()
        }
        if not any(missing.values()):
            return
        if self.documents.count_rows():
            self.documents.update(values={"pipeline_fingerprint": METADATA_UNREAD})
        for name, fields in missing.items():
            if fields:
                self._table(name).add_columns(fields)

    def _add_filled_later_columns(self, fp: Fingerprint) -> None:
        """Give a dataset made before them the FILLED_LATER_COLUMNS it lacks, empty; nothing is
        read again (runs fill them as they go)."""
        schemas = {CHUNKS_TABLE: chunks_schema(fp), DOCUMENTS_TABLE: DOCUMENTS_SCHEMA}
        for name, columns in FILLED_LATER_COLUMNS.items():
            table = self._table(name)
            missing = [column for column in columns if column not in table.schema.names]
            if missing:
                table.add_columns([schemas[name].field(column) for column in missing])

    def indexed_columns(self) -> set[str]:
        """Columns of the chunks table that have an index."""
        return upkeep.indexed_columns(self.chunks)

    # -- reads and writes -------------------------------------------------------------------

    def ledger(self) -> dict[str, LedgerEntry]:
        """doc_id → what the documents table records about it."""
        return ledger.read_ledger(self.documents)

    def stored_vectors(self, text_hashes: list[str]) -> dict[str, np.ndarray]:
        """Vectors already stored for these chunk text hashes (same model: the fingerprint)."""
        return chunk_store.stored_vectors(self.chunks, text_hashes)

    def write_batch(
        self, documents: list[Document], chunks: list[Chunk], vectors: np.ndarray
    ) -> None:
        """Replace the chunk sets of a batch of documents in one commit, then update the ledger.

        Indexed and empty documents get exactly the chunks given (their old chunks are deleted
        in the same merge). A failed document keeps its previous chunks, so a bad re-index
        never removes the last good version. The ledger is written after the chunks, so it
        never claims chunks that are not in the table.

        In a run that started on an empty chunks table (a first run, a rebuild), a document
        has no chunks before its first write, so they are appended: a merge there joins the
        batch with every row the run wrote before, and its memory grew with the table
        (benchmarks/RESULTS.md, "Scale"). A batch with a document written before merges; a
        write that fails part-way (then retried) and every write after it merge, as does a
        run after a crash (its table is not empty).
        """
        appending, self._appending = self._appending, False  # until this write is whole
        doc_ids = {doc.doc_id for doc in documents}
        faults.maybe_fail("write")
        fp, at = self.fingerprint, now()
        append = appending and self._written.isdisjoint(doc_ids)
        chunk_store.replace_chunks(self.chunks, documents, chunks, vectors, fp, at, append)
        faults.maybe_crash("write")  # between the chunks commit and the ledger commit
        if documents:
            ledger.record(self.documents, documents, chunks, fp, at)
        if appending:
            self._written |= doc_ids
            self._appending = True

    def record_failed(self, documents: list[Document]) -> None:
        """Mark documents failed in the ledger only; their old chunks stay searchable."""
        ledger.record(self.documents, documents, [], self.fingerprint, now())

    def refresh_stats(self, sources: list[SourceFile]) -> None:
        """Record new sizes and mtimes of files whose bytes are unchanged (ledger only)."""
        if sources:
            ledger.refresh_stats(self.documents, sources)

    def delete(self, doc_ids: list[str]) -> int:
        """Remove documents and their chunks; returns the number of chunks deleted.

        The chunks go first: a run stopped in between still finds the documents in the
        ledger, sees them gone from the folder, and deletes them again.
        """
        if not doc_ids:
            return 0
        deleted = chunk_store.delete_chunks(self.chunks, list(doc_ids))
        faults.maybe_crash("delete")  # between the chunks commit and the ledger commit
        ledger.forget(self.documents, list(doc_ids))
        return deleted

    # -- upkeep, tags, restore, the lock ----------------------------------------------------

    def finalize(self, run_tag: str) -> int:
        """Full-text index, compaction, old-version cleanup, and a tag on the version produced
        (see `upkeep`), then the vocabulary of that version. Returns the chunks table version
        a reader now sees."""
        upkeep.finalize(self.chunks, self.documents, run_tag)
        vocabulary.refresh(self._db, self.chunks)
        return self.chunks.version

    def vocabulary(self) -> Vocabulary | None:
        """The terms the chunks hold and the languages they are written in; None where the
        dataset has no vocabulary yet (see `vocabulary.refresh`)."""
        return Vocabulary.of(self._db)

    def chunks_changed(self) -> bool:
        """Whether the chunks table was written since the newest run tag (or has none): this
        run, or a crashed one, made a new state of the chunks, which `finalize` tags."""
        return upkeep.changed_since_tag(self.chunks)

    def finalize_ledger(self) -> None:
        """After a run that changed the ledger and no chunk: its upkeep, no new tag (see
        `upkeep.finalize_ledger`); and the vocabulary where the dataset has none of the
        current chunks yet (one made before it)."""
        upkeep.finalize_ledger(self.documents)
        vocabulary.refresh(self._db, self.chunks)

    def is_finalized(self) -> bool:
        """Whether the newest run tag still points at the current version of both tables:
        nothing was committed since the last finalize (a crashed run leaves it False), and
        the vocabulary describes that version (a dataset made before it has none)."""
        return upkeep.is_finalized((self.chunks, self.documents)) and vocabulary.is_current(
            self._db, self.chunks
        )

    def run_tags(self) -> dict[str, int]:
        """Run tag → chunks table version, oldest first."""
        self.fingerprint  # noqa: B018 - a clear DatasetError for a missing dataset
        return upkeep.run_tags(self.chunks)

    def restore(self, tag: str) -> int:
        """Make the tagged versions of both tables the current ones (a new commit each).

        Returns the new chunks table version.
        """
        self.fingerprint  # noqa: B018 - a clear DatasetError for a missing dataset
        upkeep.restore((self.chunks, self.documents), tag, self.uri)
        self._tables.clear()
        self._fingerprint = None
        return self.chunks.version

    def at(self, tag: str) -> Dataset:
        """The dataset as the tagged run left it, read-only (another object; this one is not
        changed): for comparing a run with the one before."""
        past = Dataset(self.uri)
        for name in (CHUNKS_TABLE, DOCUMENTS_TABLE):
            past._table(name).checkout(tag)
        return past

    def lock(self, timeout: float, logger: Logger) -> AbstractContextManager[None]:
        """Hold the dataset's ingest lock (see `tasks.dataset.lock`)."""
        return ingest_lock(self.uri, timeout, logger)

    # -- search primitives (see `chunk_store`) ----------------------------------------------

    def nearest(
        self,
        vector: np.ndarray,
        columns: list[str],
        where: str | None,
        limit: int,
        column: str = VECTOR_COLUMN,
    ) -> list[dict[str, Any]]:
        """Up to `limit` rows nearest to `vector` by cosine distance (`_distance`) of the
        vectors of `column`."""
        return chunk_store.nearest(self.chunks, vector, columns, where, limit, column)

    def matching(
        self, query: str | chunk_store.Terms, columns: list[str], where: str | None, limit: int
    ) -> list[dict[str, Any]]:
        """Up to `limit` rows by BM25 relevance (`_score`) to `query` (a question's text, or
        weighted terms) in the full-text index."""
        return chunk_store.matching(self.chunks, query, columns, where, limit)
