"""The dataset's vocabulary: each full-text term and the number of chunks that hold it, and the
languages its chunks are written in, in a third table (`terms`).

A question in one language is translated into the dataset's other languages with a bilingual
dictionary, keeping only the words the documents use (tasks/search/question.py): this table
says which those are, and which languages there are to translate into, without reading the
chunks. It is made again by each run that changed the chunks table (after its finalize, from
the analysed text and language columns: `refresh`), and records the chunks version it was
made from; a dataset made before it has none until its next such run, and its questions
are not translated meanwhile. After a restore it describes the newer state until the next
run: a term it lists may be missing, which only costs a translation that finds nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta

import lancedb
import pyarrow as pa
import pyarrow.compute as pc
from lancedb.table import Table

from tasks.core.scripts import LANGUAGE_OF_GROUP, language_group
from tasks.dataset.schema import LANGUAGE_COLUMN, SEARCH_TEXT_COLUMN, TERMS_SCHEMA, TERMS_TABLE
from tasks.dataset.sql import sql_in

MADE_FROM_KEY = b"doc_indexer.chunks_version"  # the chunks version the table was made from
LANGUAGES_KEY = b"doc_indexer.languages"  # the languages held, comma-separated
# A language is held where at least this share of the chunks is written in it (a stray
# English licence file does not make a Chinese dataset bilingual).
MIN_LANGUAGE_SHARE = 0.05
SCAN_ROWS = 8192  # chunks read at a time
KEEP_VERSIONS = timedelta(minutes=1)  # the table's older versions go once this old


def primary_language(tag: str | None) -> str | None:
    """ "zh" for "zh-cn", "en" for "en-US"; None for none."""
    return tag.split("-")[0].lower() if tag else None


def chunk_language(stated: str | None, text: str | None) -> str | None:
    """A chunk's primary language: its document's, else what its script shows (a short
    note's language is often not detected)."""
    return primary_language(stated) or LANGUAGE_OF_GROUP.get(language_group(text or ""))


def count(chunks: Table) -> tuple[pa.Table, dict[str, int], int]:
    """(term → the number of chunks holding it, as a table of TERMS_SCHEMA; primary language
    → its chunks, `chunk_language`; the chunks read), the chunks read in batches."""
    terms: Counter[str] = Counter()
    languages: Counter[str | None] = Counter()
    total = 0
    names = chunks.schema.names
    columns = [c for c in (SEARCH_TEXT_COLUMN, LANGUAGE_COLUMN, "text") if c in names]
    for batch in chunks.search().select(columns).limit(None).to_batches(SCAN_ROWS):
        total += batch.num_rows
        stated = (
            batch.column(LANGUAGE_COLUMN).to_pylist()
            if LANGUAGE_COLUMN in columns
            else [None] * batch.num_rows
        )
        texts = batch.column("text").to_pylist()
        languages.update(map(chunk_language, stated, texts))
        if SEARCH_TEXT_COLUMN in columns:
            terms.update(_chunk_terms(batch.column(SEARCH_TEXT_COLUMN)))
    table = pa.table({"term": list(terms), "chunks": list(terms.values())}, schema=TERMS_SCHEMA)
    return table, {language: n for language, n in languages.items() if language}, total


def _chunk_terms(search_text: pa.Array) -> Iterable[str]:
    """Each distinct term of each chunk once (a chunk counts once per term it holds)."""
    words = pc.utf8_split_whitespace(pc.fill_null(search_text, ""))
    pairs = pa.table(
        {
            "row": pc.list_parent_indices(words),
            "term": pc.list_flatten(words),
        }
    )
    distinct = pairs.group_by(["row", "term"]).aggregate([])
    counted = distinct.group_by("term").aggregate([("row", "count")])
    return dict(
        zip(
            counted.column("term").to_pylist(), counted.column("row_count").to_pylist(), strict=True
        )
    )


def is_current(db: lancedb.DBConnection, chunks: Table) -> bool:
    """Whether the terms table was made from the chunks table's current version."""
    if TERMS_TABLE not in db.table_names():
        return False
    metadata = db.open_table(TERMS_TABLE).schema.metadata or {}
    return metadata.get(MADE_FROM_KEY) == str(chunks.version).encode()


def refresh(db: lancedb.DBConnection, chunks: Table) -> bool:
    """Make the terms table again where it is missing or was made from another chunks
    version; whether it was made."""
    if is_current(db, chunks):
        return False
    terms, languages, total = count(chunks)
    held = sorted(
        language for language, n in languages.items() if total and n >= MIN_LANGUAGE_SHARE * total
    )
    metadata = {MADE_FROM_KEY: str(chunks.version).encode(), LANGUAGES_KEY: ",".join(held).encode()}
    data = terms.replace_schema_metadata(metadata)
    table = db.create_table(TERMS_TABLE, data, mode="overwrite")
    table.optimize(cleanup_older_than=KEEP_VERSIONS)
    return True


@dataclass
class Vocabulary:
    """The terms table as a search reads it: the languages held, and how many chunks hold
    each of the terms asked about (asked once each)."""

    table: Table
    languages: frozenset[str]
    made_from: int | None  # the chunks version it was made from
    _known: dict[str, int] = field(default_factory=dict)
    _all: bool = False  # every term is in _known

    @classmethod
    def of(cls, db: lancedb.DBConnection) -> Vocabulary | None:
        """The dataset's vocabulary; None where it has no terms table yet."""
        if TERMS_TABLE not in db.table_names():
            return None
        table = db.open_table(TERMS_TABLE)
        metadata = table.schema.metadata or {}
        held = metadata.get(LANGUAGES_KEY, b"").decode()
        made_from = metadata.get(MADE_FROM_KEY)
        return cls(
            table,
            frozenset(filter(None, held.split(","))),
            int(made_from) if made_from is not None else None,
        )

    def load(self) -> Vocabulary:
        """Read every term now (a searcher that answers many questions)."""
        rows = self.table.to_arrow()
        self._known = dict(
            zip(rows.column("term").to_pylist(), rows.column("chunks").to_pylist(), strict=True)
        )
        self._all = True
        return self

    def chunks_holding(self, terms: Iterable[str]) -> dict[str, int]:
        """term → the chunks holding it, for those of `terms` the dataset holds."""
        wanted = list(dict.fromkeys(terms))
        if not self._all:
            asked = [term for term in wanted if term not in self._known]
            if asked:
                found = self.table.search().where(sql_in("term", asked)).limit(None).to_arrow()
                self._known.update({term: 0 for term in asked})
                self._known.update(
                    zip(
                        found.column("term").to_pylist(),
                        found.column("chunks").to_pylist(),
                        strict=True,
                    )
                )
        return {term: n for term in wanted if (n := self._known.get(term, 0))}
