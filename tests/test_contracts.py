"""Things declared once stay declared once: reasons, columns, options and what derives from them."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import types
import typing

import pyarrow as pa
import pytest

from flows.evaluate import EvaluateRequest, evaluate
from flows.ingest import ingest
from flows.query_flow import query
from flows.restore import RestoreRequest, restore
from tasks.core.options import add_options, option_fields, parse_options
from tasks.core.reasons import Reason, Status
from tasks.core.records import Chunk
from tasks.dataset.schema import CHUNK_COLUMNS, DOCUMENT_COLUMNS
from tasks.ingest.settings import IngestSettings
from tasks.search.hits import HIT_COLUMNS, Hit
from tasks.search.params import SearchParams
from tasks.search.request import QueryRequest, SearchRequest

from .conftest import ROOT

ARROW_TYPES = {
    str: (pa.string(),),
    int: (pa.int32(), pa.int64()),
    float: (pa.float32(),),
    list[str]: (pa.list_(pa.string()),),  # null when empty
}


def readme_reasons() -> dict[str, tuple[str, str]]:
    """reason → (status, meaning) from README.md's table of reasons."""
    rows = re.findall(
        r"^ *\| `([a-z_]+)` \| (\w+) \| (.+?) \|$", (ROOT / "README.md").read_text("utf-8"), re.M
    )
    return {code: (status, meaning) for code, status, meaning in rows}


def test_the_readme_lists_every_reason_with_its_status_and_meaning():
    assert readme_reasons() == {r.value: (r.status.value, r.meaning) for r in Reason}


def test_every_reason_ends_empty_or_failed():
    assert {reason.status for reason in Reason} == {Status.EMPTY, Status.FAILED}


def test_chunk_rows_start_with_the_fields_of_chunk_and_hits_read_chunk_columns():
    columns = {field.name: field for field in CHUNK_COLUMNS}
    chunk_fields = [field.name for field in dataclasses.fields(Chunk)]
    assert [field.name for field in CHUNK_COLUMNS[: len(chunk_fields)]] == chunk_fields
    hints = typing.get_type_hints(Hit)
    # score, found_by (which of hybrid mode's lists found the hit) and the text around the
    # hit are not columns
    not_columns = ("score", "found_by", "context", "context_start", "context_end")
    assert HIT_COLUMNS == [name for name in hints if name not in not_columns]
    assert not set(not_columns) & set(columns)
    for name in HIT_COLUMNS:
        kind = hints[name]
        nullable = isinstance(kind, types.UnionType)
        base = (
            next(arg for arg in typing.get_args(kind) if arg is not type(None))
            if nullable
            else kind
        )
        assert columns[name].type in ARROW_TYPES[base], name
        assert columns[name].nullable or not (nullable or base == list[str]), name
    ledger = {field.name for field in DOCUMENT_COLUMNS}
    assert {"status", "reason", "error"} <= ledger


def flow_parameters_of(flow) -> dict[str, object]:
    return {
        name: parameter.default for name, parameter in inspect.signature(flow.fn).parameters.items()
    }


@pytest.mark.parametrize(
    ("flow", "model"),
    [
        (ingest, IngestSettings),
        (query, QueryRequest),
        (restore, RestoreRequest),
        (evaluate, EvaluateRequest),
    ],
)
def test_flow_parameters_are_the_options_with_their_defaults(flow, model):
    expected = {
        name: inspect.Parameter.empty if info.is_required() else info.default
        for name, info in option_fields(model).items()
    }
    assert flow_parameters_of(flow) == expected
    schema = flow.parameters.properties
    for name, info in option_fields(model).items():
        assert schema[name]["description"] == info.description, name


def test_the_command_lines_take_every_option_with_the_same_defaults(tmp_path):
    parser = argparse.ArgumentParser()
    add_options(parser, IngestSettings)
    args = parser.parse_args([str(tmp_path)])
    settings = parse_options(parser, args, IngestSettings)
    assert settings == IngestSettings(source_dir=str(tmp_path))
    dests = {action.dest for action in parser._actions} - {"help"}
    assert dests == set(option_fields(IngestSettings))


def test_the_service_body_is_the_search_options_and_the_question():
    assert set(SearchRequest.model_fields) == set(SearchParams.model_fields) | {"text"}
    assert set(SearchParams.model_fields) <= set(QueryRequest.model_fields)
    body = SearchRequest.model_validate({"query": "hash maps", "k": 3})
    assert (body.text, body.params()) == ("hash maps", SearchParams(k=3))


def test_an_invalid_option_names_the_flag_the_user_typed(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    add_options(parser, IngestSettings)
    for argv, message in [
        ([str(tmp_path), "--chunk-size", "0"], "--chunk-size: Input should be greater than"),
        ([str(tmp_path / "nowhere")], "SOURCE_DIR: source folder not found"),
        ([str(tmp_path), "--chunk-overlap", "2000"], "must be smaller than chunk_size"),
    ]:
        args = parser.parse_args(argv)
        with pytest.raises(SystemExit):
            parse_options(parser, args, IngestSettings)
        assert message in capsys.readouterr().err
