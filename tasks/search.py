"""Search the chunks table by vector, full text or both, with filters pushed into LanceDB.

Modes and what a hit's `score` means:
- vector: cosine similarity of the question's embedding (made with the dataset's own model)
  and the chunk's (1 − cosine distance; higher is better, at most 1).
- fts: BM25 relevance from LanceDB's native full-text index on `text` (unbounded, higher is
  better).
- hybrid: reciprocal-rank fusion of both rankings, Σ 1 / (RRF_K + rank) over the vector and
  full-text lists a chunk appears in (at most 2 / (RRF_K + 1) ≈ 0.033).

`min_score` is a floor on the cosine similarity in vector and hybrid mode (in hybrid mode it
drops candidates before fusion, since RRF values carry no absolute meaning) and on BM25 in fts
mode. Filters become one SQL prefilter in which every user value is a quoted literal (or
a LIKE pattern with its wildcards escaped), so no value is ever read as SQL.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import reduce
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.ann import tune
from tasks.discover import MIME_TYPES
from tasks.embed import Embedder, get_embedder, model_spec_for
from tasks.schema import (
    CHUNKS_TABLE,
    DOCUMENTS_TABLE,
    escape_like,
    glob_to_like,
    sql_in,
    sql_string,
    stored_fingerprint,
)
from tasks.storage import DatasetError, connect, local_path
from tasks.store import read_fingerprint, run_tags

MODES = ("vector", "fts", "hybrid")
TYPES = {suffix.lstrip("."): mime for suffix, mime in MIME_TYPES.items()}  # md → text/markdown
MAX_K = 1000
RRF_K = 60  # the usual rank constant of reciprocal-rank fusion (Cormack et al., 2009)
HYBRID_DEPTH = 50  # candidates taken from each ranking before fusion
PER_DOC_OVERFETCH = 5  # chunks fetched per wanted document with per_doc, grown as needed
HIT_COLUMNS = [
    "chunk_id",
    "doc_id",
    "source_path",
    "title",
    "section",
    "page_number",
    "chunk_index",
    "chunk_count",
    "text",
]


@dataclass(frozen=True)
class Hit:
    """One search result; `score` depends on the mode (see the module docstring)."""

    chunk_id: str
    doc_id: str
    source_path: str
    title: str
    section: str
    page_number: int | None
    chunk_index: int
    chunk_count: int
    score: float
    text: str


@dataclass(frozen=True)
class SearchParams:
    """How to search: the same options for the command line, batch files and the service.

    `mode` None means hybrid when the dataset has a full-text index, vector otherwise.
    `since` is inclusive and `until` exclusive, both on the document's modification time;
    either may be given as text for `parse_time`.
    """

    k: int = 5
    mode: str | None = None
    source: str | None = None  # glob on the relative or absolute path
    type: str | None = None  # a key of TYPES
    section: str | None = None  # the heading path contains this, ignoring case
    since: datetime | str | None = None
    until: datetime | str | None = None
    min_score: float | None = None
    per_doc: bool = False  # only the best chunk of each document

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError("k must be at least 1")
        if self.k > MAX_K:
            raise ValueError(f"k must be at most {MAX_K}")
        if self.mode not in (None, *MODES):
            raise ValueError(f"mode must be one of {', '.join(MODES)}")
        if self.type not in (None, *TYPES):
            raise ValueError(f"type must be one of {', '.join(TYPES)}")
        for name in ("since", "until"):
            value = getattr(self, name)
            if isinstance(value, str):
                try:
                    object.__setattr__(self, name, parse_time(value))
                except ValueError as exc:
                    raise ValueError(f"{name} is {exc}") from None
            elif value is not None and value.tzinfo is None:
                object.__setattr__(self, name, value.replace(tzinfo=UTC))
        if self.since and self.until and self.since >= self.until:
            raise ValueError("since must be earlier than until")
        if self.min_score is not None and not math.isfinite(self.min_score):
            raise ValueError("min_score must be a finite number")


_RELATIVE = re.compile(r"(\d+)([mhdw])")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_time(value: str) -> datetime:
    """An ISO 8601 date or date-time (UTC unless it says otherwise), or an age like `7d`.

    Ages count back from now in minutes (m), hours (h), days (d) or weeks (w).
    """
    relative = _RELATIVE.fullmatch(value.strip())
    if relative:
        amount, unit = relative.groups()
        return datetime.now(UTC) - timedelta(**{_UNITS[unit]: int(amount)})
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(
            f"not a date, date-time or age: {value!r} (try 2024-05-01, 2024-05-01T12:00 or 7d)"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


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
    if params.type is not None:
        parts.append(f"mime_type = {sql_string(TYPES[params.type])}")
    if params.section is not None:
        parts.append(section_filter(params.section))
    if doc_window is not None:
        parts.append(doc_window)
    return " AND ".join(parts) or None


def rrf(rankings: list[list[Hit]], depth: int) -> list[Hit]:
    """Reciprocal-rank fusion: chunks ranked by Σ 1 / (RRF_K + rank) over the rankings."""
    fused: dict[str, float] = {}
    first_seen: dict[str, Hit] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            fused[hit.chunk_id] = fused.get(hit.chunk_id, 0.0) + 1.0 / (RRF_K + rank)
            first_seen.setdefault(hit.chunk_id, hit)
    order = sorted(fused, key=lambda chunk_id: -fused[chunk_id])[:depth]
    return [_with_score(first_seen[chunk_id], fused[chunk_id]) for chunk_id in order]


def best_per_doc(hits: list[Hit]) -> list[Hit]:
    """The first (best-ranked) hit of each document, in rank order."""
    best: dict[str, Hit] = {}
    for hit in hits:
        best.setdefault(hit.doc_id, hit)
    return list(best.values())


def _with_score(hit: Hit, score: float) -> Hit:
    return replace(hit, score=round(score, 6))


def _hit(row: dict, score: float) -> Hit:
    return Hit(**{name: row[name] for name in HIT_COLUMNS}, score=round(score, 6))


class Searcher:
    """One open dataset, searched with the model that built it; reuse it across queries.

    With `consistency` set, each query first checks for newer table versions (at most that
    often), so a long-lived searcher sees what later ingest runs write, a rebuild with another
    model included: the model follows the fingerprint stored in the table.
    """

    def __init__(self, uri: str, consistency: timedelta | None = None):
        read_fingerprint(uri)  # a clear DatasetError for a missing or foreign dataset
        self.uri = uri
        db = connect(uri, consistency)
        self.chunks = db.open_table(CHUNKS_TABLE)
        self.documents = db.open_table(DOCUMENTS_TABLE)
        self._indexed: tuple[int, set[str]] = (-1, set())

    @property
    def fingerprint(self) -> dict:
        return stored_fingerprint(self.chunks.schema)

    def embedder(self) -> Embedder:
        """The dataset's embedding model, loaded once per process."""
        fp = self.fingerprint
        try:
            embedder = get_embedder(model_spec_for(fp["model"]))
        except Exception as exc:
            raise DatasetError(
                f"{self.uri} was built with model {fp['model']}, which cannot be loaded here: {exc}"
            ) from None
        if embedder.dimension != fp["dimension"]:
            raise DatasetError(
                f"{self.uri} holds {fp['dimension']}-d vectors but model {fp['model']} "
                f"makes {embedder.dimension}-d ones; re-index it with --rebuild"
            )
        return embedder

    def check_model(self, model: str) -> None:
        """Refuse a dataset that was not built with `model` (a name or spec)."""
        built = self.fingerprint["model"]
        if model not in (built, model_spec_for(built)):
            raise DatasetError(
                f"{self.uri} was built with model {built}, not {model}; query it without "
                f"--model, or re-index it with `python -m flows.ingest DIR --model {model} "
                "--rebuild`"
            )

    def indexed_columns(self) -> set[str]:
        """Columns of the chunks table with an index, read once per table version."""
        version = self.chunks.version
        if self._indexed[0] != version:
            indices = self.chunks.list_indices()
            self._indexed = (version, {column for index in indices for column in index.columns})
        return self._indexed[1]

    def resolve_mode(self, mode: str | None) -> str:
        """The mode to use: hybrid by default once a full-text index exists, else vector."""
        has_fts = "text" in self.indexed_columns()
        if mode is None:
            return "hybrid" if has_fts else "vector"
        if mode != "vector" and not has_fts:
            raise DatasetError(
                f"{self.uri} has no full-text index yet (the ingest flow creates it); "
                "use --mode vector"
            )
        return mode

    def search(self, text: str, params: SearchParams) -> list[Hit]:
        return self.search_many([text], params)[0]

    def search_many(self, texts: list[str], params: SearchParams) -> list[list[Hit]]:
        """Hits for each text; the texts are embedded in one batch."""
        mode = self.resolve_mode(params.mode)
        where = chunk_filter(params, self._doc_window(params.since, params.until))
        vectors = self.embedder().encode(texts) if mode != "fts" else [None] * len(texts)
        return [
            self._search_one(text, vector, mode, where, params)
            for text, vector in zip(texts, vectors, strict=True)
        ]

    def _search_one(
        self,
        text: str,
        vector: np.ndarray | None,
        mode: str,
        where: str | None,
        params: SearchParams,
    ) -> list[Hit]:
        """Top hits for one query; with per_doc, fetch more chunks until k documents show."""
        limit = params.k * PER_DOC_OVERFETCH if params.per_doc else params.k
        while True:
            hits = self._ranked(text, vector, mode, where, limit, params.min_score)
            if not params.per_doc:
                return hits
            best = best_per_doc(hits)
            if len(best) >= params.k or len(hits) < limit:
                return best[: params.k]
            limit *= 4

    def _ranked(
        self,
        text: str,
        vector: np.ndarray | None,
        mode: str,
        where: str | None,
        limit: int,
        min_score: float | None,
    ) -> list[Hit]:
        """Up to `limit` hits in `mode`, each at or above `min_score` (see the module doc)."""
        if mode == "vector":
            return _above(self._vector(vector, where, limit), min_score)
        if mode == "fts":
            return _above(self._fts(text, where, limit, None), min_score)
        depth = max(limit, HYBRID_DEPTH)
        by_vector = _above(self._vector(vector, where, depth), min_score)
        floor = None if min_score is None else (vector, min_score)
        return rrf([by_vector, self._fts(text, where, depth, floor)], limit)

    def _vector(self, vector: np.ndarray, where: str | None, limit: int) -> list[Hit]:
        """Nearest chunks by cosine; exact below the ANN threshold, tuned IVF above it.

        A selective prefilter can leave the probed index lists short of `limit` rows, so then
        the same query runs as an exact scan of the (filtered) rows instead.
        """
        query = self.chunks.search(vector, vector_column_name="vector")
        query = query.distance_type("cosine").select([*HIT_COLUMNS, "_distance"]).limit(limit)
        query = tune(query)
        if where is not None:
            query = query.where(where, prefilter=True)
        rows = query.to_list()
        if where is not None and len(rows) < limit and "vector" in self.indexed_columns():
            rows = query.bypass_vector_index().to_list()
        return [_hit(row, 1.0 - row["_distance"]) for row in rows]

    def _fts(
        self, text: str, where: str | None, limit: int, floor: tuple[np.ndarray, float] | None
    ) -> list[Hit]:
        """Chunks by BM25; with `floor` (vector, minimum), only those with at least that cosine
        similarity to the vector (stored vectors are unit length: cosine is a dot product)."""
        columns = [*HIT_COLUMNS, "_score", *(["vector"] if floor is not None else [])]
        query = self.chunks.search(text, query_type="fts", fts_columns="text")
        query = query.select(columns).limit(limit)
        if where is not None:
            query = query.where(where, prefilter=True)
        rows = query.to_list()
        if floor is not None:
            vector, minimum = floor
            rows = [row for row in rows if float(np.dot(row["vector"], vector)) >= minimum]
        return [_hit(row, row["_score"]) for row in rows]

    def _doc_window(self, since: datetime | None, until: datetime | None) -> str | None:
        """doc_id condition for documents modified in [since, until), from the ledger.

        Written as IN or NOT IN, whichever lists fewer ids; None when every document is in.
        """
        if since is None and until is None:
            return None
        ledger = self.documents.search().select(["doc_id", "mtime"]).limit(None).to_arrow()
        bounds = [
            *([pc.greater_equal(ledger["mtime"], since)] if since is not None else []),
            *([pc.less(ledger["mtime"], until)] if until is not None else []),
        ]
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


def _above(hits: list[Hit], min_score: float | None) -> list[Hit]:
    return hits if min_score is None else [hit for hit in hits if hit.score >= min_score]


def prefer_latency() -> None:
    """Embed on one CPU thread, in a process that embeds one short question at a time.

    Intra-op threads gain next to nothing on a dozen tokens, and on a busy host they spin
    against other work: measured on this 2-core machine at load 3.7, one encode took 10 ms
    with 1 thread and 480 ms with 2. The service calls it; processes that also ingest or
    encode batches (the CLI, tests, evaluation) keep torch's default.
    """
    import torch

    torch.set_num_threads(1)


def search_vector(
    uri: str, vector: np.ndarray, k: int = 5, source_glob: str | None = None
) -> list[Hit]:
    """The k chunks nearest to `vector` by cosine similarity, optionally filtered by path glob."""
    where = chunk_filter(SearchParams(k=k, source=source_glob))
    return Searcher(uri)._vector(vector, where, k)


def search_texts(uri: str, texts: list[str], params: SearchParams) -> list[list[Hit]]:
    """Open the dataset and its model once, then search for every text."""
    return Searcher(uri).search_many(texts, params)


search_task = task(search_texts, name="search", retries=1, cache_policy=NO_CACHE)


@dataclass(frozen=True)
class BatchQuery:
    qid: str
    query: str


def read_queries(path: str | Path) -> list[BatchQuery]:
    """Queries from a JSON Lines file of {"qid": …, "query": …}; ValueError names a bad line."""
    queries = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                qid, text = record["qid"], record["query"]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise ValueError(
                    f'{path} line {number}: expected {{"qid": …, "query": "…"}}'
                ) from None
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{path} line {number}: the query is empty")
            queries.append(BatchQuery(str(qid), text))
    return queries


_SNIPPET_TERM = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]+|\w{3,}")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")


def snippet(text: str, question: str, width: int = 300) -> str:
    """The `width`-character window of `text` that holds the most words of the question.

    Whitespace is collapsed; Chinese, Japanese and Korean runs count by character pairs.
    """
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    terms = set()
    for term in _SNIPPET_TERM.findall(question):
        if _CJK.match(term) and len(term) > 1:
            terms.update(term[i : i + 2] for i in range(len(term) - 1))
        else:
            terms.add(term)
    starts = []
    if terms:
        pattern = "|".join(re.escape(term) for term in sorted(terms, key=len, reverse=True))
        starts = [match.start() for match in re.finditer(pattern, flat, re.IGNORECASE)]
    best, most, end = 0, 0, 0
    for first, start in enumerate(starts):
        while end < len(starts) and starts[end] < start + width * 3 // 4:
            end += 1
        if end - first > most:
            best, most = start, end - first
    begin = max(0, min(best - width // 4, len(flat) - width))
    window = flat[begin : begin + width].strip()
    return ("… " if begin else "") + window + (" …" if begin + width < len(flat) else "")


def index_stats(searcher: Searcher) -> dict:
    """What the dataset holds and how it is indexed (no model is loaded)."""
    chunks, documents = searcher.chunks, searcher.documents
    statuses = documents.search().select(["status"]).limit(None).to_arrow()["status"]
    by_status = {row["values"]: row["counts"] for row in pc.value_counts(statuses).to_pylist()}
    return {
        "index": searcher.uri,
        "chunks": chunks.count_rows(),
        "documents": documents.count_rows(),
        "documents_by_status": dict(sorted(by_status.items())),
        "model": searcher.fingerprint["model"],
        "fingerprint": searcher.fingerprint,
        "table_version": chunks.version,
        "run_tags": run_tags(searcher.uri),
        "indexes": [
            {
                "name": index.name,
                "type": index.index_type,
                "columns": list(index.columns),
                "indexed_rows": index.num_indexed_rows,
                "unindexed_rows": index.num_unindexed_rows,
            }
            for index in chunks.list_indices()
        ],
        "default_mode": searcher.resolve_mode(None),
        "size_bytes": _size_on_disk(searcher.uri, [chunks, documents]),
    }


def _size_on_disk(uri: str, tables) -> int:
    """Bytes under a local dataset (old versions and indexes included); for an object store,
    which is not listed from here, the bytes of the tables' live data."""
    folder = local_path(uri)
    if folder is not None:
        return sum(
            (Path(parent) / name).stat().st_size
            for parent, _, names in os.walk(folder)
            for name in names
        )
    return sum(table.stats()["total_bytes"] for table in tables)


def list_sources(searcher: Searcher) -> list[dict]:
    """Every document in the ledger with its status and chunk count, by doc_id."""
    columns = ["doc_id", "mime_type", "status", "n_chunks", "mtime", "error"]
    ledger = searcher.documents.search().select(columns).limit(None).to_arrow()
    rows = sorted(ledger.to_pylist(), key=lambda row: row["doc_id"])
    return [{**row, "mtime": row["mtime"].isoformat()} for row in rows]
