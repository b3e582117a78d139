"""How to search: every search option declared once, for the command line, batch files, the
query flow's parameters and the service's POST /search body."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from typing import Literal, Self

from pydantic import field_validator, model_validator

from tasks.core.options import Settings, option
from tasks.parse.formats import TYPES

Mode = Literal["vector", "fts", "hybrid"]
MODES: tuple[Mode, ...] = ("vector", "fts", "hybrid")
MAX_K = 1000
# What `expand` can widen a hit to (tasks/search/context.py).
Expand = Literal["section"]
MAX_CONTEXT = 10  # most neighbouring chunks on each side of a hit
SECTION_LIMIT = 8_000  # most characters of an expanded section, centred on the hit when cut
# Candidates a cross-encoder re-scores by default: as many as hybrid mode fuses from each
# ranking (what that costs: README, "Reranking").
RERANK_DEPTH = 50

_RELATIVE = re.compile(r"(\d+)([mhdw])")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_LANGUAGE_TAG = re.compile(r"[a-z]{2,3}(?:-[a-z0-9]{1,8})*")


class SearchOptions(Settings):
    """How to search, except with which cross-encoder (SearchParams adds that; the service's
    body only switches the service's own on or off). `mode` None means hybrid when the
    dataset has a full-text index, vector otherwise. `since` is inclusive and `until`
    exclusive, both on the document's modification time; either may be given as text for
    `parse_time`."""

    k: int = option(5, "number of hits", flag="-k", ge=1, le=MAX_K)
    mode: Mode | None = option(None, "vector, fts or hybrid (default: hybrid if the index has FTS)")
    source: str | None = option(
        None,
        "only documents whose relative or absolute path matches GLOB (* also crosses /)",
        metavar="GLOB",
    )
    type: str | None = option(None, "only documents of this type", choices=tuple(TYPES))
    section: str | None = option(
        None, "only sections whose heading path contains TEXT", metavar="TEXT"
    )
    since: datetime | None = option(
        None,
        "documents modified at or after: ISO date or date-time (UTC unless stated), or 7d",
        metavar="WHEN",
    )
    until: datetime | None = option(
        None, "documents modified before (same forms as --since)", metavar="WHEN"
    )
    author: str | None = option(
        None, "only documents with an author whose name contains TEXT (any case)", metavar="TEXT"
    )
    lang: str | None = option(
        None,
        "only documents in this language, declared or detected: en also matches en-us",
        metavar="CODE",
    )
    meta: list[str] = option(
        [],
        "only documents that declare KEY (any case) with VALUE, or a list holding it "
        "(front matter, <meta>, PDF info, ...); repeat to ask for several",
        metavar="KEY=VALUE",
    )
    min_score: float | None = option(
        None,
        "score floor: cosine in vector and hybrid mode, BM25 in fts mode, the cross-encoder's "
        "score with --rerank",
        metavar="X",
    )
    per_doc: bool = option(False, "only the best chunk of each document")
    rerank_depth: int = option(
        RERANK_DEPTH,
        "with reranking, how many candidates the cross-encoder re-scores (at least k)",
        metavar="N",
        ge=1,
        le=MAX_K,
    )
    context: int = option(
        0,
        "give each hit the text of N neighbouring chunks of its document on each side",
        metavar="N",
        ge=0,
        le=MAX_CONTEXT,
    )
    expand: Expand | None = option(
        None,
        f"give each hit the text of its whole section (at most {SECTION_LIMIT:,} characters, "
        "centred on the hit)",
    )

    @field_validator("since", "until", mode="before")
    @classmethod
    def _parse_time(cls, value: object) -> object:
        return parse_time(value) if isinstance(value, str) else value

    @field_validator("since", "until")
    @classmethod
    def _utc_unless_stated(cls, value: datetime | None) -> datetime | None:
        return value.replace(tzinfo=UTC) if value and value.tzinfo is None else value

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str | None) -> str | None:
        if value is not None and value not in TYPES:
            raise ValueError(f"must be one of {', '.join(TYPES)}")
        return value

    @field_validator("lang")
    @classmethod
    def _language_tag(cls, value: str | None) -> str | None:
        if value is None:
            return value
        tag = value.strip().lower().replace("_", "-")
        if not _LANGUAGE_TAG.fullmatch(tag):
            raise ValueError("must be a language code such as en, de or pt-br")
        return tag

    @field_validator("meta")
    @classmethod
    def _key_value_pairs(cls, value: list[str]) -> list[str]:
        for pair in value:
            if not pair.partition("=")[0].strip() or "=" not in pair:
                raise ValueError("each must be KEY=VALUE, e.g. status=draft")
        return value

    @field_validator("min_score")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    @model_validator(mode="after")
    def _window(self) -> Self:
        if self.since and self.until and self.since >= self.until:
            raise ValueError("since must be earlier than until")
        if self.context and self.expand:
            raise ValueError("context and expand cannot be combined: choose one")
        return self

    @property
    def mime_type(self) -> str | None:
        return TYPES[self.type] if self.type else None

    @property
    def meta_pairs(self) -> list[tuple[str, str]]:
        """The `meta` filters as (key, value), spaces around either removed."""
        return [(k.strip(), v.strip()) for k, _, v in (p.partition("=") for p in self.meta)]

    def describe(self) -> str:
        """The options that differ from the defaults, for a run log."""
        changed = self.model_dump(exclude_defaults=True)
        return ", ".join(f"{name}={value!r}" for name, value in changed.items()) or "defaults"


class SearchParams(SearchOptions):
    """How to search, with the folder of the cross-encoder that re-ranks, if any: what the
    command line, batch files and the query flow take."""

    rerank: str | None = option(
        None,
        "re-score the best candidates with the sentence-transformers cross-encoder in this "
        "local folder (score = its relevance score)",
        metavar="PATH",
    )


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
        # The value is not repeated: the caller knows it, and the service echoes nothing back.
        raise ValueError(
            "not a date, date-time or age (try 2024-05-01, 2024-05-01T12:00 or 7d)"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
