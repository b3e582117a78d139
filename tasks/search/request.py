"""What a search asks: the question next to the search options, declared once for the query
flow, the command line and the service's POST /search body."""

from __future__ import annotations

import re

from pydantic import AliasChoices, ConfigDict, Field, field_validator

from tasks.core.options import Settings, option
from tasks.dataset.location import DatasetOption
from tasks.search.params import SearchOptions, SearchParams


class Question(Settings):
    """The question or search text; the service also takes it under the key "query", as in
    batch files."""

    text: str = Field(
        description="the question or search text",
        validation_alias=AliasChoices("text", "query"),
        json_schema_extra={"positional": True},
    )

    @field_validator("text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the search text is empty")
        return value


# What no text of a service request may hold: control characters other than tab and line
# breaks, and lone surrogates (no encoder takes them).
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


class SearchRequest(SearchOptions, Question):
    """The body of the service's POST /search: a question with its search options.

    Which cross-encoder re-ranks is the service's own command line's choice (`--serve
    --rerank PATH`); a request may only switch it on or off. Types are strict ("5" is not
    5, "yes" is not true) and the texts hold no control characters."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    rerank: bool | None = option(
        None,
        "re-score the candidates with the service's cross-encoder (default: on when the "
        "service was started with --rerank)",
    )

    @field_validator("rerank", mode="before")
    @classmethod
    def _switch_only(cls, value: object) -> object:
        # Before validation, so a folder name gets this message and is never looked at.
        if value is not None and not isinstance(value, bool):
            raise ValueError(
                "must be true or false: the service re-ranks only with the cross-encoder "
                "it was started with"
            )
        return value

    @field_validator("text", "source", "section", "author", "meta")
    @classmethod
    def _no_control_characters(cls, value: str | list[str] | None) -> str | list[str] | None:
        texts = [value] if isinstance(value, str) else value or []
        if any(_CONTROL.search(text) for text in texts):
            raise ValueError("must not hold control characters other than tab and line breaks")
        return value

    def params(self, reranker: str | None = None) -> SearchParams:
        """The search options, re-ranking with the cross-encoder in folder `reranker` (the
        service's) unless the request switched reranking off."""
        options = self.model_dump(include=set(SearchOptions.model_fields))
        return SearchParams(**options, rerank=reranker if self.rerank is not False else None)


class ArtifactOption(Settings):
    artifact: bool | None = option(
        None, "publish the hits as the query-hits table artifact (default: in deployment runs)"
    )


class QueryRequest(DatasetOption, SearchParams, Question, ArtifactOption):
    """A search of one dataset: the query flow's parameters."""
