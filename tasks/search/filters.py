"""Search options as one SQL prefilter, every user value a quoted literal or escaped pattern.

Conditions on a chunk's own columns (source, type, section, and the document metadata copied
onto each chunk: authors, language) are SQL on the chunks table. Conditions that need the
ledger (the modification time window, the declared keys of `--meta`) are resolved there to
the doc_ids that meet them, written as one `doc_id IN (...)` or `NOT IN` condition.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import reduce
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tasks.dataset.dataset import Dataset
from tasks.dataset.location import DatasetError
from tasks.dataset.schema import CHUNKS_TABLE, DOCUMENTS_TABLE
from tasks.dataset.sql import escape_like, glob_to_like, sql_in, sql_string
from tasks.search.params import SearchParams

# Between a document's authors when they are matched as one text (no name holds a line break).
_AUTHOR_SEPARATOR = "\n"


def source_filter(source_glob: str) -> str:
    """SQL filter matching a glob against the relative doc_id or the absolute source path."""
    like = sql_string(glob_to_like(source_glob))
    return f"(doc_id LIKE {like} OR source_path LIKE {like})"


def section_filter(text: str) -> str:
    """SQL filter: the heading path contains `text`, ignoring case."""
    return f"lower(section) LIKE {sql_string('%' + escape_like(text.lower()) + '%')}"


def author_filter(text: str) -> str:
    """SQL filter: one of the document's authors contains `text`, ignoring case."""
    pattern = sql_string("%" + escape_like(text.lower()) + "%")
    names = f"array_to_string(authors, {sql_string(_AUTHOR_SEPARATOR)})"
    return f"lower({names}) LIKE {pattern}"


def language_filter(tag: str) -> str:
    """SQL filter: the document's language is `tag` or a variant of it (en: en, en-us)."""
    variants = sql_string(escape_like(tag) + "-%")
    return f"(language = {sql_string(tag)} OR language LIKE {variants})"


def chunk_filter(params: SearchParams, doc_window: str | None = None) -> str | None:
    """The SQL prefilter for `params`; `doc_window` is the condition on doc_id that the
    ledger decides (`document_condition`)."""
    parts = []
    if params.source is not None:
        parts.append(source_filter(params.source))
    if params.mime_type is not None:
        parts.append(f"mime_type = {sql_string(params.mime_type)}")
    if params.section is not None:
        parts.append(section_filter(params.section))
    if params.author is not None:
        parts.append(author_filter(params.author))
    if params.lang is not None:
        parts.append(language_filter(params.lang))
    if doc_window is not None:
        parts.append(doc_window)
    return " AND ".join(parts) or None


def search_filter(dataset: Dataset, params: SearchParams) -> str | None:
    """The SQL prefilter of a search of `dataset`: `chunk_filter` with the ledger's
    conditions resolved. A metadata filter on a dataset made before metadata was read is a
    DatasetError that says how to get it."""
    _require_columns(dataset, params)
    ledger = None
    columns = _ledger_columns(params)
    if columns:
        ledger = dataset.documents.search().select(["doc_id", *columns]).limit(None).to_arrow()
    return chunk_filter(params, None if ledger is None else document_condition(ledger, params))


def _ledger_columns(params: SearchParams) -> list[str]:
    window = params.since is not None or params.until is not None
    return [*(["mtime"] if window else []), *(["meta"] if params.meta else [])]


def _require_columns(dataset: Dataset, params: SearchParams) -> None:
    wanted = [
        *([(CHUNKS_TABLE, "authors", "--author")] if params.author is not None else []),
        *([(CHUNKS_TABLE, "language", "--lang")] if params.lang is not None else []),
        *([(DOCUMENTS_TABLE, "meta", "--meta")] if params.meta else []),
    ]
    for table, column, flag in wanted:
        names = (dataset.chunks if table == CHUNKS_TABLE else dataset.documents).schema.names
        if column not in names:
            raise DatasetError(
                f"{dataset.uri} was indexed before document metadata was read (its {table} "
                f"table has no {column} column), so {flag} cannot filter it: run the ingest "
                "flow on it once more (it reads every file again, keeping the stored "
                "vectors) and filter then"
            )


def document_condition(ledger: pa.Table, params: SearchParams) -> str | None:
    """doc_id condition for the documents that the ledger says meet `params`: modified in
    [since, until) (its mtime column), declaring every `meta` pair (its meta column).

    Written as IN or NOT IN, whichever lists fewer ids; None when every document is in.
    """
    masks = []
    if params.since is not None or params.until is not None:
        masks.append(_window(ledger, params.since, params.until))
    if params.meta:
        pairs = params.meta_pairs
        masks.append(pa.array([declares(meta, pairs) for meta in ledger["meta"].to_pylist()]))
    if not masks:
        return None
    return _doc_ids_condition(ledger["doc_id"], reduce(pc.and_, masks))


def doc_window(ledger: pa.Table, since: datetime | None, until: datetime | None) -> str | None:
    """doc_id condition for documents modified in [since, until), from the ledger's
    doc_id and mtime columns (see `document_condition`)."""
    if since is None and until is None:
        return None
    return _doc_ids_condition(ledger["doc_id"], _window(ledger, since, until))


def _window(ledger: pa.Table, since: datetime | None, until: datetime | None) -> Any:
    bounds = [
        *([pc.greater_equal(ledger["mtime"], since)] if since is not None else []),
        *([pc.less(ledger["mtime"], until)] if until is not None else []),
    ]
    return reduce(pc.and_, bounds)


def _doc_ids_condition(doc_ids: Any, inside: Any) -> str | None:
    kept = doc_ids.filter(inside).to_pylist()
    dropped = doc_ids.filter(pc.invert(inside)).to_pylist()
    if not dropped:
        return None
    if not kept:
        return "false"
    if len(kept) <= len(dropped):
        return sql_in("doc_id", kept)
    return f"NOT {sql_in('doc_id', dropped)}"


def declares(meta: str | None, pairs: list[tuple[str, str]]) -> bool:
    """Whether the declared keys (a ledger's meta JSON text) hold every (key, value) pair:
    keys and values compared ignoring case, a value as JSON writes it (true, 3), a list
    holding the value counting."""
    if not pairs:
        return True
    try:
        declared = json.loads(meta) if meta else {}
    except json.JSONDecodeError:
        return False
    if not isinstance(declared, dict):
        return False
    by_key = {str(key).casefold(): value for key, value in declared.items()}
    for key, wanted in pairs:
        value = by_key.get(key.casefold())
        values = value if isinstance(value, list) else [value]
        if not any(_text(item) == wanted.casefold() for item in values if item is not None):
            return False
    return True


def _text(value: Any) -> str:
    return (value if isinstance(value, str) else json.dumps(value)).casefold()
