"""Search options as one SQL prefilter, every user value a quoted literal or escaped pattern."""

from __future__ import annotations

from datetime import datetime
from functools import reduce

import pyarrow as pa
import pyarrow.compute as pc

from tasks.dataset.sql import escape_like, glob_to_like, sql_in, sql_string
from tasks.search.params import SearchParams


def source_filter(source_glob: str) -> str:
    """SQL filter matching a glob against the relative doc_id or the absolute source path."""
    like = sql_string(glob_to_like(source_glob))
    return f"(doc_id LIKE {like} OR source_path LIKE {like})"


def section_filter(text: str) -> str:
    """SQL filter: the heading path contains `text`, ignoring case."""
    return f"lower(section) LIKE {sql_string('%' + escape_like(text.lower()) + '%')}"


def chunk_filter(params: SearchParams, doc_window: str | None = None) -> str | None:
    """The SQL prefilter for `params`; `doc_window` is the freshness condition on doc_id."""
    parts = []
    if params.source is not None:
        parts.append(source_filter(params.source))
    if params.mime_type is not None:
        parts.append(f"mime_type = {sql_string(params.mime_type)}")
    if params.section is not None:
        parts.append(section_filter(params.section))
    if doc_window is not None:
        parts.append(doc_window)
    return " AND ".join(parts) or None


def doc_window(ledger: pa.Table, since: datetime | None, until: datetime | None) -> str | None:
    """doc_id condition for documents modified in [since, until), from the ledger's
    doc_id and mtime columns.

    Written as IN or NOT IN, whichever lists fewer ids; None when every document is in.
    """
    bounds = [
        *([pc.greater_equal(ledger["mtime"], since)] if since is not None else []),
        *([pc.less(ledger["mtime"], until)] if until is not None else []),
    ]
    if not bounds:
        return None
    inside = reduce(pc.and_, bounds)
    doc_ids = ledger["doc_id"]
    kept = doc_ids.filter(inside).to_pylist()
    dropped = doc_ids.filter(pc.invert(inside)).to_pylist()
    if not dropped:
        return None
    if not kept:
        return "false"
    if len(kept) <= len(dropped):
        return sql_in("doc_id", kept)
    return f"NOT {sql_in('doc_id', dropped)}"
