"""What a search asks: the question next to the search options, declared once for the query
flow, the command line and the service's POST /search body."""

from __future__ import annotations

from pydantic import AliasChoices, Field, field_validator

from tasks.core.options import Settings, option
from tasks.dataset.location import DatasetOption
from tasks.search.params import SearchParams


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


class SearchRequest(SearchParams, Question):
    """A question with its search options: the body of POST /search."""

    def params(self) -> SearchParams:
        return self.narrow(SearchParams)


class ArtifactOption(Settings):
    artifact: bool | None = option(
        None, "publish the hits as the query-hits table artifact (default: in deployment runs)"
    )


class QueryRequest(DatasetOption, SearchParams, Question, ArtifactOption):
    """A search of one dataset: the query flow's parameters."""
