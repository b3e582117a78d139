"""Batch queries: a JSON Lines file of {"qid", "query"}, read with clear errors."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


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
