"""The text around a hit (`context`, `expand`) and hits as Markdown quotes, through the real
ingest flow, query flow, command line and service, on a small hash-embedded index."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import pytest

from flows.ingest import ingest
from flows.query import main, render_markdown
from flows.query_flow import query
from flows.service import create_app
from tasks.dataset.dataset import Dataset
from tasks.search.context import Piece, around_hit, centred, join_pieces
from tasks.search.hits import Hit
from tasks.search.params import SECTION_LIMIT, SearchParams
from tasks.search.searcher import Searcher

from .document_files import make_pdf

CHUNK_SIZE, OVERLAP = 200, 60


def sentences(name: str, count: int) -> str:
    """One paragraph of `count` sentences, each with its own searchable word."""
    return " ".join(f"{name.title()} fact {i} names {name}word{i:03d}." for i in range(count))


# Alpha and Beta span a few chunks each, Gamma more than SECTION_LIMIT characters.
HANDBOOK = (
    "# Handbook\n\nPreface with an openingword.\n\n"
    f"## Alpha\n\n{sentences('alpha', 20)}\n\n"
    f"## Beta\n\n{sentences('beta', 15)}\n\n"
    f"## Gamma\n\n{sentences('gamma', 400)}\n"
)


SECTIONS = ("Alpha", "Beta", "Gamma")


def flat(text: str) -> str:
    """Text with its whitespace collapsed and Markdown heading marks left out."""
    return " ".join(word for word in text.split() if word.strip("#"))


@pytest.fixture(scope="module")
def index(prefect_backend, tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("context")
    (root / "corpus").mkdir()
    (root / "corpus" / "handbook.md").write_text(HANDBOOK, "utf-8")
    (root / "corpus" / "pelican.pdf").write_bytes(make_pdf("Pelican notes: the pelicanword."))
    uri = str(root / "index")
    summary = ingest(
        source_dir=str(root / "corpus"),
        index_uri=uri,
        model="hash:64",
        chunk_size=CHUNK_SIZE,
        chunk_overlap=OVERLAP,
    )
    assert summary.indexed == 2 and not summary.failed
    return uri


def chunks_of(uri: str, doc_id: str) -> list[dict[str, Any]]:
    """The document's chunks in order, read straight from the table."""
    rows = Dataset(uri).chunks.search().where(f"doc_id = '{doc_id}'").limit(None).to_list()
    return sorted(rows, key=lambda row: row["chunk_index"])


def only_hit(uri: str, word: str, **options: Any) -> Hit:
    """The best full-text hit for `word`, found by the query flow."""
    hits = query(text=word, index_uri=uri, mode="fts", k=1, **options)
    assert len(hits) == 1 and word in hits[0].text
    return hits[0]


def assert_wraps_its_hit(hit: Hit) -> None:
    """The context holds the hit's own text at its range, and repeats nothing of the
    document: it is a stretch of the document text."""
    assert hit.context is not None and hit.context_start is not None
    assert hit.context[hit.context_start : hit.context_end] == hit.text
    assert flat(hit.context) in flat(HANDBOOK)


@pytest.mark.integration
def test_the_handbook_chunks_overlap_and_change_section(index):
    chunks = chunks_of(index, "handbook.md")
    overlapping = [a for a, b in itertools.pairwise(chunks) if b["char_start"] < a["char_end"]]
    assert len(overlapping) >= 3  # otherwise the joins below would test nothing
    sections = [c["section"] for c in chunks]
    assert sections[:2] == ["Handbook", "Handbook > Alpha"]
    assert set(sections) == {"Handbook", *(f"Handbook > {name}" for name in SECTIONS)}


@pytest.mark.integration
def test_context_at_the_document_start(index):
    chunks = chunks_of(index, "handbook.md")
    hit = only_hit(index, "openingword", context=2)
    assert hit.chunk_index == 0 and hit.context_start == 0
    assert_wraps_its_hit(hit)
    assert hit.context is not None
    assert hit.context.startswith(chunks[0]["text"])
    assert hit.context.endswith(chunks[2]["text"])
    assert chunks[3]["text"] not in hit.context
    expanded = only_hit(index, "openingword", expand="section")  # a one-chunk section
    assert (expanded.context, expanded.context_start, expanded.context_end) == (
        hit.text,
        0,
        len(hit.text),
    )


@pytest.mark.integration
def test_context_at_the_document_end(index):
    chunks = chunks_of(index, "handbook.md")
    hit = only_hit(index, "gammaword399", context=2)
    assert hit.chunk_index == len(chunks) - 1
    assert_wraps_its_hit(hit)
    assert hit.context is not None and hit.context_end == len(hit.context)
    assert hit.context.startswith(chunks[-3]["text"])
    assert flat(hit.context) == flat(
        HANDBOOK[HANDBOOK.index(chunks[-3]["text"]) :]
    )  # no text left out, none twice


@pytest.mark.integration
def test_context_crosses_a_section_boundary_and_expand_stops_at_it(index):
    chunks = chunks_of(index, "handbook.md")
    alpha = [c for c in chunks if c["section"] == "Handbook > Alpha"]
    beta = [c for c in chunks if c["section"] == "Handbook > Beta"]
    assert len(alpha) >= 3 and len(beta) >= 2
    hit = only_hit(index, "alphaword019", context=1)
    assert hit.chunk_index == alpha[-1]["chunk_index"]
    assert_wraps_its_hit(hit)
    assert hit.context is not None
    assert hit.context.startswith(alpha[-2]["text"]) and hit.context.endswith(beta[0]["text"])

    section = only_hit(index, "alphaword019", expand="section")
    assert_wraps_its_hit(section)
    assert section.context is not None and section.context_end == len(section.context)
    assert flat(section.context) == flat(
        "Alpha\n\n" + sentences("alpha", 20)
    )  # all of Alpha, from its heading, and nothing of Beta or the preface

    middle = only_hit(index, "betaword007", expand="section")
    assert_wraps_its_hit(middle)
    assert middle.context is not None
    assert flat(middle.context) == flat("Beta\n\n" + sentences("beta", 15))


@pytest.mark.integration
def test_a_long_section_is_cut_to_the_limit_around_the_hit(index):
    gamma_length = len(sentences("gamma", 400))
    assert gamma_length > 1.5 * SECTION_LIMIT
    middle = only_hit(index, "gammaword200", expand="section")
    assert_wraps_its_hit(middle)
    assert middle.context is not None and middle.context_start is not None
    assert SECTION_LIMIT - 100 <= len(middle.context) <= SECTION_LIMIT
    after = len(middle.context) - (middle.context_end or 0)
    assert abs(middle.context_start - after) <= 100  # centred on the hit
    words = set(sentences("gamma", 400).split())
    assert set(middle.context.split()) <= words  # cut between words, not inside one

    first = only_hit(index, "gammaword000", expand="section")
    assert_wraps_its_hit(first)
    assert first.context is not None and first.context.startswith("Gamma\n\nGamma fact 0 ")
    assert SECTION_LIMIT - 100 <= len(first.context) <= SECTION_LIMIT


@pytest.mark.integration
def test_neighbours_of_every_hit_come_in_one_query_and_none_without_context(index, monkeypatch):
    searcher = Searcher(Dataset(index))
    table = searcher.dataset.chunks
    plain_queries: list[int] = []
    search = table.search

    def counted(query: Any = None, *args: Any, **kwargs: Any) -> Any:
        if query is None:  # a filter-only query: the neighbours' (the searches pass a query)
            plain_queries.append(1)
        return search(query, *args, **kwargs)

    monkeypatch.setattr(table, "search", counted)
    words = ["alphaword005", "betaword003", "gammaword100 gammaword300"]
    params = SearchParams(mode="fts", k=3)
    without = searcher.search_many(words, params)
    assert not plain_queries and all(hit.context is None for hits in without for hit in hits)

    with_context = searcher.search_many(words, params.model_copy(update={"context": 1}))
    assert len(plain_queries) == 1
    assert [[hit.chunk_id for hit in hits] for hits in with_context] == [
        [hit.chunk_id for hit in hits] for hits in without
    ]
    for hits in with_context:
        for hit in hits:
            assert_wraps_its_hit(hit)
    searcher.search_many(words, params.model_copy(update={"expand": "section"}))
    assert len(plain_queries) == 2


def test_context_and_expand_are_refused_together_and_bounded():
    with pytest.raises(ValueError, match="cannot be combined"):
        SearchParams(context=1, expand="section")
    with pytest.raises(ValueError, match="less than or equal to 10"):
        SearchParams(context=11)
    with pytest.raises(ValueError, match="'section'"):
        SearchParams(expand="document")


@pytest.mark.integration
def test_the_service_returns_the_context_fields(index):
    from fastapi.testclient import TestClient

    client = TestClient(create_app(Searcher(Dataset(index))))
    body = {"text": "betaword007", "mode": "fts", "k": 1}
    plain = client.post("/search", json=body).json()[0]
    assert (plain["context"], plain["context_start"], plain["context_end"]) == (None, None, None)
    assert plain["char_end"] - plain["char_start"] == len(plain["text"])
    for extra in ({"context": 2}, {"expand": "section"}):
        answer = client.post("/search", json=body | extra)
        assert answer.status_code == 200
        hit = answer.json()[0]
        assert hit["context"][hit["context_start"] : hit["context_end"]] == hit["text"]
        assert len(hit["context"]) > len(hit["text"])
    refused = client.post("/search", json=body | {"context": 1, "expand": "section"})
    assert refused.status_code == 422
    assert "cannot be combined" in refused.json()["problems"][0]["message"]
    assert client.post("/search", json=body | {"context": "1"}).status_code == 422


@pytest.mark.integration
def test_the_command_line_prints_context_as_json_and_markdown(index, capsys):
    common = ["--index", index, "--mode", "fts", "-k", "2"]
    assert main(["alphaword019", *common, "--json", "--context", "1"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert hits[0]["context"][hits[0]["context_start"] : hits[0]["context_end"]] == hits[0]["text"]

    assert main(["alphaword019 pelicanword", *common, "--format", "markdown"]) == 0
    markdown = capsys.readouterr().out
    assert markdown.startswith("1. > ") and "\n\n2. > " in markdown
    assert re.search(r"> [^\n]*alphaword019\.\n\n   — handbook\.md, Handbook > Alpha\n", markdown)
    assert "> Pelican notes: the pelicanword.\n\n   — pelican.pdf, page 1\n" in markdown

    assert (
        main(["alphaword019", *common, "-k", "1", "--format", "markdown", "--expand", "section"])
        == 0
    )
    quoted = capsys.readouterr().out
    assert "> Alpha\n   >\n   > Alpha fact 0 names alphaword000." in quoted
    assert "Beta" not in quoted

    assert main(["alphaword019", *common, "--context", "1"]) == 0
    table = " ".join(capsys.readouterr().out.split())
    assert re.search(r"Alpha fact 16 [^»«]*»[^»«]*alphaword019\.« Beta Beta fact 0 ", table)

    for bad in (
        ["--context", "1", "--expand", "section"],
        ["--json", "--format", "markdown"],
    ):
        with pytest.raises(SystemExit) as exit_:
            main(["x", *common, *bad])
        assert exit_.value.code == 2
    with pytest.raises(SystemExit):
        main(["--stats", "--index", index, "--format", "markdown"])
    assert "--format markdown prints the hits of one question" in capsys.readouterr().err


def test_markdown_quotes_each_line_and_cites_source_section_and_page():
    hit = Hit(
        "a.pdf:chunk:0003",
        "docs/a.pdf",
        "/corpus/docs/a.pdf",
        "A",
        "Intro > Setup",
        3,
        3,
        9,
        1.0,
        "First line.\n\nSecond line.",
        10,
        35,
    )
    assert render_markdown([hit]) == (
        "1. > First line.\n   >\n   > Second line.\n\n   — docs/a.pdf, Intro > Setup, page 3"
    )


def test_pieces_join_by_their_offsets():
    document = "One two three.\n\nFour five six seven eight."
    spans = [(0, 14), (16, 30), (21, 42)]  # a blank line between the first two, then overlap
    pieces = [Piece(i, "", document[a:b], a, b) for i, (a, b) in enumerate(spans)]
    text, starts = join_pieces(pieces)
    assert text == document
    assert [text[s : s + len(p.text)] for s, p in zip(starts, pieces, strict=True)] == [
        p.text for p in pieces
    ]
    spaced = [Piece(0, "", "One", 0, 3), Piece(1, "", "two", 4, 7)]  # one trimmed space
    assert join_pieces(spaced) == ("One two", [0, 4])


def test_a_cut_keeps_the_hit_and_moves_to_word_boundaries_when_it_can():
    words = " ".join(f"w{i:03d}" for i in range(200))  # 999 characters
    start = words.index("w100")
    text, begin, end = centred(words, start, start + 4, 101)
    assert text[begin:end] == "w100" and len(text) <= 101
    assert set(text.split()) <= set(words.split()) and abs(begin - (len(text) - end)) <= 5
    han = "字" * 500  # no spaces: cut anyway, at the limit
    text, begin, end = centred(han, 250, 260, 100)
    assert (len(text), begin, end) == (100, 45, 55)
    assert centred("short", 0, 5, 100) == ("short", 0, 5)


def test_a_hit_whose_document_changed_since_gets_its_own_text_only():
    hit = Hit("d.md:chunk:0001", "d.md", "/d.md", "d", "", None, 1, 3, 1.0, "old text", 10, 18)
    now = {i: Piece(i, "", f"new text {i}", 10 * i, 10 * i + 10) for i in range(3)}
    stale = around_hit(hit, now, context=1, section=False, limit=SECTION_LIMIT)
    assert (stale.context, stale.context_start, stale.context_end) == ("old text", 0, 8)
