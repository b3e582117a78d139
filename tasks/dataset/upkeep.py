"""Upkeep of the two tables: their indexes, compaction, old-version cleanup, run tags, restore.

Every finalized run that changed the chunks tags the version it produced in both tables; a
run that changed the ledger alone (a failed file tried again, new sizes and mtimes) makes no
tag but moves the newest one to the ledger's new version (`finalize_ledger`), so no two tags
name one state of the chunks and the kept tags are the last states that differ. Cleanup keeps
every version a kept run tag points at (the newest KEEP_RUN_TAGS runs) and everything younger
than MIN_VERSION_AGE, so versions and data files stay bounded while the last runs can still
be restored.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from lancedb.index import FTS
from lancedb.table import Table

from tasks.core import faults
from tasks.core.memory import release_free_memory
from tasks.dataset.ann import refresh_vector_index
from tasks.dataset.location import DatasetError
from tasks.dataset.schema import CHUNKS_TABLE, DOCUMENTS_TABLE, SEARCH_TEXT_COLUMN

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
# Margins between the cleanup cutoff and the oldest tagged version, tried in turn. The cutoff
# is computed from this process's clock just before the call; on a busy machine the call can
# start late enough for it to pass the oldest tagged version, which LanceDB refuses.
_TAG_MARGINS = (timedelta(seconds=0.5), timedelta(seconds=5), timedelta(minutes=1))


def indexed_columns(table: Table) -> set[str]:
    """Columns of the table that have an index."""
    return {column for index in table.list_indices() for column in index.columns}


def create_key_indexes(table: Table) -> None:
    """Create the table's missing scalar key indexes (KEY_INDEXES)."""
    indexed = indexed_columns(table)
    for key in KEY_INDEXES[table.name]:
        if key not in indexed:
            table.create_scalar_index(key, index_type="BTREE")


def finalize(chunks: Table, documents: Table, run_tag: str) -> None:
    """Full-text index, compaction, old-version cleanup, and `run_tag` on the version produced.

    Each step's buffers are handed back to the OS before the next one starts, so the run's
    peak is that of its largest step, not of the steps' sum (benchmarks/finalize_memory.py).
    """
    release_free_memory()  # the run's own freed buffers first
    if chunks.count_rows() > 0 and SEARCH_TEXT_COLUMN not in indexed_columns(chunks):
        chunks.create_index(SEARCH_TEXT_COLUMN, config=FULL_TEXT_INDEX)
        release_free_memory()
    if refresh_vector_index(chunks):  # an ANN index once the table is big enough
        release_free_memory()
    faults.maybe_crash("index")  # indexes made, nothing compacted or tagged yet
    for table in (chunks, documents):
        tags = sorted(t for t in table.tags.list() if t.startswith(RUN_TAG_PREFIX))
        for old in tags[: max(0, len(tags) - (KEEP_RUN_TAGS - 1))]:
            table.tags.delete(old)
        # Compact and update indexes first, sparing everything near the oldest tag; the
        # second pass has nothing to compact, so its cutoff lands right before the oldest
        # tagged version.
        table.optimize(cleanup_older_than=_cleanup_age(table, margin=timedelta(hours=1)))
        release_free_memory()
        faults.maybe_crash("compact")  # 1st: chunks compacted, untagged; 2nd: the documents
        _clean_up_to_oldest_tag(table)
        table.tags.create(run_tag, table.version)


def finalize_ledger(documents: Table) -> None:
    """After a run that changed the ledger and no chunk: the ledger's index updated, its
    versions compacted and cleaned up as `finalize` does, and the newest run tag moved to the
    version produced (the chunks it names are the current ones), so that no new tag names the
    same chunks as the last one and the dataset is finalized again."""
    newest = _newest_run_tag(documents)
    if newest is None or newest[1] == documents.version:
        return
    release_free_memory()
    documents.optimize(cleanup_older_than=_cleanup_age(documents, margin=timedelta(hours=1)))
    _clean_up_to_oldest_tag(documents)
    documents.tags.update(newest[0], documents.version)


def changed_since_tag(table: Table) -> bool:
    """Whether the table has a version its newest run tag does not name: written since the
    last finalize, or never finalized."""
    newest = _newest_run_tag(table)
    return newest is None or newest[1] != table.version


def is_finalized(tables: tuple[Table, ...]) -> bool:
    """Whether the newest run tag still points at the current version of every table."""
    return not any(changed_since_tag(table) for table in tables)


def _newest_run_tag(table: Table) -> tuple[str, int] | None:
    """The newest run tag of the table and the version it names; None when it has none."""
    tags = table.tags.list()
    runs = sorted(name for name in tags if name.startswith(RUN_TAG_PREFIX))
    return (runs[-1], tags[runs[-1]]["version"]) if runs else None


def run_tags(table: Table) -> dict[str, int]:
    """Tag → the table's version it points at, oldest first."""
    tags = table.tags.list()
    return {name: tags[name]["version"] for name in sorted(tags)}


def restore(tables: tuple[Table, ...], tag: str, uri: str) -> None:
    """Make the tagged version of every table the current one (a new commit each)."""
    for table in tables:
        if tag not in table.tags.list():
            known = ", ".join(sorted(table.tags.list())) or "none"
            raise DatasetError(f"no tag {tag!r} in {uri} (run tags: {known})")
        table.checkout(tag)
        table.restore()


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
