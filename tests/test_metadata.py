"""Document metadata: read from one file of each format, stored once per document in the ledger
(and on its chunks for filters and hits), filtered by --author, --lang and --meta through the
real ingest flow, and a dataset from before metadata still answers."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from email.message import EmailMessage
from functools import cache
from pathlib import Path

import pytest
from pydantic import ValidationError

from flows.ingest import ingest
from flows.query_flow import query
from tasks.core.reasons import Reason, Status
from tasks.core.records import Document
from tasks.dataset.dataset import Dataset
from tasks.dataset.location import DatasetError
from tasks.dataset.schema import ADDED_COLUMNS, CHUNKS_TABLE, DOCUMENTS_TABLE, Fingerprint
from tasks.embed.hash_backend import HashEmbedder
from tasks.ingest.discover import discover
from tasks.ingest.steps import LOAD_CACHE
from tasks.parse.document import load_document
from tasks.parse.metadata import date_text, detect_language, language_tag
from tasks.parse.readers.text import read_text
from tasks.search.filters import chunk_filter, declares
from tasks.search.info import list_sources
from tasks.search.params import SearchParams
from tasks.search.searcher import Searcher
from tasks.text.split import SplitSettings, split_document

from .document_files import convert, load_named, make_pdf
from .office_files import make_docx, make_pptx, make_xlsx

FRONT_MATTER = """\
---
title: Camelid Field Notes
author: [Aino Virtanen, Mikko Lahti]
date: 2024-05-01
lastmod: 2024-06-02T10:30:00+03:00
lang: fi
status: draft
tags: [llama, alpaca]
---

# Llamas

Llamas live in the Andes and carry loads for herders.
"""

HTML = """\
<!DOCTYPE html>
<html lang="en-GB"><head><title>Quokka Survey</title>
<meta name="author" content="Ann O'Brien 100%">
<meta name="author" content="Ben Lee">
<meta name="date" content="2023-11-20">
<meta name="keywords" content="quokka, island">
<meta name="description" content="A count of quokkas.">
</head><body><h1>Counting</h1><p>Quokkas were counted on the island in spring.</p></body></html>
"""

GERMAN = (
    "Die Lamas leben in den Anden und tragen Lasten für die Hirten. Sie sind freundliche "
    "Tiere, die in Herden leben und sehr gut klettern können.\n"
)

# An RTF file's {\info} group, as word processors write it (é as \'e9 in code page 1252).
RTF_INFO = (
    rb"{\info{\title Alpaca R\'e9sum\'e9}{\author Cl\'e9a Dupont}"
    rb"{\creatim\yr2022\mo3\dy4\hr9\min15}{\revtim\yr2022\mo4\dy5\hr10\min0}}"
)


def pdf_with_info() -> bytes:
    import pikepdf

    pdf = pikepdf.open(io.BytesIO(make_pdf("Vicunas graze on the high plains of the Andes.")))
    pdf.docinfo["/Title"] = "Vicuna Report"
    pdf.docinfo["/Author"] = "Rosa Quispe; Juan Mamani"
    pdf.docinfo["/CreationDate"] = "D:20210304050607+02'00'"
    pdf.docinfo["/Keywords"] = "vicuna"
    pdf.Root.Lang = pikepdf.String("es-PE")
    out = io.BytesIO()
    pdf.save(out)
    return out.getvalue()


def docx_with_properties() -> bytes:
    import docx

    document = docx.Document(io.BytesIO(make_docx()))
    properties = document.core_properties
    properties.title, properties.author, properties.language = (
        "Annual Llama Report",
        "Eva Berg",
        "sv-SE",
    )
    properties.keywords = "annual"
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def pptx_with_properties() -> bytes:
    from pptx import Presentation

    presentation = Presentation(io.BytesIO(make_pptx()))
    presentation.core_properties.title = "Quarterly Llama Review"
    presentation.core_properties.author = "Tomas Ruiz"
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def xlsx_with_properties() -> bytes:
    import openpyxl

    workbook = openpyxl.load_workbook(io.BytesIO(make_xlsx()))
    workbook.properties.title = "Llama Budget"
    workbook.properties.creator = "Lena Park"
    workbook.properties.language = "ko"
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def rtf_with_info() -> bytes:
    rtf = convert("# Alpacas\n\nAlpacas hum when they are curious.\n", "rtf", "--standalone")
    header_end = rtf.index(b"\n") + 1  # after the {\rtf1... font table line
    return rtf[:header_end] + RTF_INFO + b"\n" + rtf[header_end:]


def eml_with_language() -> bytes:
    message = EmailMessage()
    message["Subject"] = "Herd report for June"
    message["From"] = "Aino Virtanen <aino@example.org>"
    message["To"] = "herders@example.org"
    message["Date"] = "Mon, 01 Jun 2026 09:30:00 +0300"
    message.set_content("Hello herders,\n\nThe llamas crossed the pass safely.\n")
    message["Content-Language"] = "en-US"  # after set_content, which drops Content-* fields
    return bytes(message)


# A date that the tool making the test file writes: the time it ran.
TOOL = "a date-time of the run"

# file name → (its maker, title, authors, created, modified, language, a key and value in meta)
FILES: dict[
    str,
    tuple[
        Callable[[], bytes],
        str,
        tuple[str, ...],
        str | None,
        str | None,
        str,
        tuple[str, str] | None,
    ],
] = {
    "notes.md": (
        FRONT_MATTER.encode,
        "Camelid Field Notes",
        ("Aino Virtanen", "Mikko Lahti"),
        "2024-05-01",
        "2024-06-02T10:30:00+03:00",
        "fi",
        ("status", "draft"),
    ),
    "survey.html": (
        HTML.encode,
        "Quokka Survey",
        ("Ann O'Brien 100%", "Ben Lee"),
        "2023-11-20",
        None,
        "en-gb",
        ("keywords", "quokka, island"),
    ),
    "vicuna.pdf": (
        pdf_with_info,
        "Vicuna Report",
        ("Rosa Quispe", "Juan Mamani"),
        "2021-03-04T05:06:07+02:00",
        None,
        "es-pe",
        ("Keywords", "vicuna"),
    ),
    "report.docx": (
        docx_with_properties,
        "Annual Llama Report",
        ("Eva Berg",),
        "2013-12-23T23:15:00+00:00",  # python-docx's template's
        "2013-12-23T23:15:00+00:00",
        "sv-se",
        ("keywords", "annual"),
    ),
    "review.pptx": (
        pptx_with_properties,
        "Quarterly Llama Review",
        ("Tomas Ruiz",),
        "2013-01-27T09:14:16+00:00",  # python-pptx's template's
        "2013-01-27T09:15:58+00:00",
        "en",  # declares none: detected in the text
        ("lastModifiedBy", "Steve Canny"),
    ),
    "budget.xlsx": (
        xlsx_with_properties,
        "Llama Budget",
        ("Lena Park",),
        TOOL,  # openpyxl's time of saving
        TOOL,
        "ko",
        ("creator", "Lena Park"),
    ),
    "camelids.odt": (
        lambda: convert(FRONT_MATTER, "odt"),
        "Camelid Field Notes",
        ("Aino Virtanen", "Mikko Lahti"),
        TOOL,  # pandoc's time of writing
        TOOL,
        "fi",
        ("initial-creator", "Aino Virtanen; Mikko Lahti"),
    ),
    "camelids.epub": (
        lambda: convert(FRONT_MATTER, "epub"),
        "Camelid Field Notes",
        ("Aino Virtanen", "Mikko Lahti"),
        "2024-05-01",
        TOOL,  # pandoc's time of writing
        "fi",
        ("language", "fi"),
    ),
    "alpacas.rtf": (
        rtf_with_info,
        "Alpaca Résumé",
        ("Cléa Dupont",),
        "2022-03-04T09:15:00",
        "2022-04-05T10:00:00",
        "en",  # RTF declares languages by number per run of text: detected
        ("author", "Cléa Dupont"),
    ),
    "herd.eml": (
        eml_with_language,
        "Herd report for June",
        ("Aino Virtanen <aino@example.org>",),
        "2026-06-01T09:30:00+03:00",
        None,
        "en-us",
        ("To", "herders@example.org"),
    ),
    "lamas.txt": (GERMAN.encode, "lamas", (), None, None, "de", None),
}


@cache
def file_bytes(name: str) -> bytes:
    """The bytes of FILES[name], made once."""
    return FILES[name][0]()


@pytest.mark.parametrize("name", sorted(FILES))
def test_metadata_is_read_from_each_format(tmp_path, name):
    _, title, authors, created, modified, language, pair = FILES[name]
    (tmp_path / name).write_bytes(file_bytes(name))
    doc = load_named(tmp_path, name)
    assert doc.status == Status.INDEXED, doc.error
    found = doc.metadata
    assert doc.title == title
    assert (found.authors, found.language) == (authors, language)
    assert same_dates((found.created, found.modified), (created, modified))
    meta = json.loads(found.meta) if found.meta else {}
    if pair is None:
        assert meta == {}
    else:
        key, value = pair
        assert meta[key] == value


def same_dates(read: tuple[str | None, ...], expected: tuple[str | None, ...]) -> bool:
    """Whether dates read are those expected, TOOL matching a date-time of this year on."""
    return all(
        (got is not None and got >= "2026" and "T" in got) if want == TOOL else got == want
        for got, want in zip(read, expected, strict=True)
    )


def test_front_matter_stays_in_the_text_and_files_without_it_read_as_before():
    with_front = [block.text for block in read_text(FRONT_MATTER.encode(), "md")]
    assert any("status: draft" in text for text in with_front), "indexed as it always was"
    plain = FRONT_MATTER.split("---\n", 2)[2]
    assert [block.text for block in read_text(plain.encode(), "md")] == with_front[1:]


def test_normalising_what_documents_state():
    assert date_text("D:20230120164927Z") == "2023-01-20T16:49:27+00:00"
    assert date_text("Mon, 01 Jun 2026 09:30:00 +0300") == "2026-06-01T09:30:00+03:00"
    assert date_text("spring 2020") == "spring 2020", "kept as stated when it does not parse"
    assert language_tag("pt_BR") == "pt-br" and language_tag("en, de") == "en"
    assert language_tag("not a language") is None
    assert (
        detect_language("长城是中国古代的军事防御工程，东起山海关，西至嘉峪关，全长数千公里。")
        == "zh"
    )
    assert detect_language("12 34 56") is None, "too few letters"
    assert detect_language(GERMAN) == detect_language(GERMAN) == "de", "seeded: one answer"


def test_the_load_cache_key_covers_the_metadata_code():
    modules = LOAD_CACHE.code_modules({})
    assert {"tasks.core.records", "tasks.parse.metadata"} <= modules


def test_meta_pairs_match_keys_and_values_in_any_case():
    meta = json.dumps({"Status": "Draft", "tags": ["llama", "alpaca"], "draft": True, "n": 3})
    assert declares(meta, [("status", "draft"), ("TAGS", "Alpaca")])
    assert declares(meta, [("draft", "true"), ("n", "3")])
    assert not declares(meta, [("status", "final")])
    assert not declares(meta, [("missing", "x")])
    assert not declares(None, [("status", "draft")])


def test_filters_are_escaped_sql():
    where = chunk_filter(SearchParams(author="O'Brien 100%", lang="en"))
    assert where is not None
    assert "'%o''brien 100\\%%'" in where
    assert "language = 'en' OR language LIKE 'en-%'" in where


def test_bad_filter_values_are_refused():
    with pytest.raises(ValidationError, match="language code"):
        SearchParams(lang="english please")
    with pytest.raises(ValidationError, match="KEY=VALUE"):
        SearchParams(meta=["status"])
    assert SearchParams(lang="PT_br").lang == "pt-br"


def test_a_failed_read_keeps_the_metadata_recorded_with_its_chunks(tmp_path):
    (tmp_path / "notes.md").write_bytes(FRONT_MATTER.encode())
    doc = load_named(tmp_path, "notes.md")
    embedder, split = HashEmbedder(16), SplitSettings()
    dataset = Dataset(str(tmp_path / "index"))
    dataset.prepare(Fingerprint.of(embedder.info, split))
    chunks = split_document(doc, split).chunks
    dataset.write_batch([doc], chunks, embedder.encode([c.text for c in chunks]))
    dataset.record_failed([Document.not_indexed(doc.source, Reason.PARSE_ERROR, "broken")])
    row = dataset.documents.search().limit(None).to_arrow().to_pylist()[0]
    assert row["status"] == "failed" and row["title"] == "Camelid Field Notes"
    assert (row["authors"], row["language"]) == (["Aino Virtanen", "Mikko Lahti"], "fi")


# --- Through the real ingest flow ------------------------------------------------------------


@pytest.fixture(scope="module")
def indexed(prefect_backend, tmp_path_factory) -> tuple[Path, str]:
    corpus = tmp_path_factory.mktemp("metadata") / "docs"
    corpus.mkdir()
    for name in FILES:
        (corpus / name).write_bytes(file_bytes(name))
    uri = str(corpus.parent / "index")
    summary = ingest(source_dir=str(corpus), index_uri=uri, model="hash:64")
    assert summary.indexed == len(FILES) and not summary.failed
    return corpus, uri


def found(uri: str, **filters: object) -> set[str]:
    params = SearchParams(k=100, mode="vector", **filters)
    return {hit.doc_id for hit in Searcher(Dataset(uri)).search("llamas", params)}


@pytest.mark.integration
def test_the_ledger_holds_each_documents_metadata_once(indexed):
    _, uri = indexed
    rows = Dataset(uri).documents.search().limit(None).to_arrow().to_pylist()
    by_id = {row["doc_id"]: row for row in rows}
    assert len(rows) == len(FILES)
    for name, (_, title, authors, created, modified, language, pair) in FILES.items():
        row = by_id[name]
        assert (row["title"], tuple(row["authors"] or ()), row["language"]) == (
            title,
            authors,
            language,
        ), name
        assert same_dates((row["created"], row["modified"]), (created, modified)), name
        if pair is not None:
            assert json.loads(row["meta"])[pair[0]] == pair[1], name


@pytest.mark.integration
def test_author_language_and_meta_filters(indexed):
    _, uri = indexed
    assert found(uri, author="aino") == {"notes.md", "camelids.odt", "camelids.epub", "herd.eml"}
    assert found(uri, author="o'brien 100%") == {"survey.html"}, "quote and % taken literally"
    assert found(uri, author="%") == {"survey.html"}
    assert found(uri, lang="fi") == {"notes.md", "camelids.odt", "camelids.epub"}
    assert found(uri, lang="en") == {"survey.html", "herd.eml", "review.pptx", "alpacas.rtf"}
    assert found(uri, lang="en-gb") == {"survey.html"}
    assert found(uri, lang="de") == {"lamas.txt"}
    # pandoc keeps the front matter's other keys as the .odt's user-defined fields
    assert found(uri, meta=["status=draft"]) == {"notes.md", "camelids.odt"}
    assert found(uri, meta=["tags=alpaca", "lang=fi"]) == {"notes.md"}
    assert found(uri, meta=["status=final"]) == set()
    assert found(uri, meta=["keywords=annual"], lang="sv") == {"report.docx"}
    assert found(uri, author="aino", lang="fi", type="md") == {"notes.md"}


@pytest.mark.integration
def test_the_query_flow_filters_and_hits_show_the_metadata(indexed):
    _, uri = indexed
    hits = query(text="llamas", index_uri=uri, k=10, mode="vector", author="Lahti", lang="fi")
    assert {hit.doc_id for hit in hits} == {"notes.md", "camelids.odt", "camelids.epub"}
    notes = next(hit for hit in hits if hit.doc_id == "notes.md")
    assert (notes.title, notes.authors, notes.language) == (
        "Camelid Field Notes",
        ["Aino Virtanen", "Mikko Lahti"],
        "fi",
    )


@pytest.mark.integration
def test_sources_show_the_metadata(indexed):
    _, uri = indexed
    sources = {row["doc_id"]: row for row in list_sources(Searcher(Dataset(uri)))}
    notes = sources["notes.md"]
    assert notes["title"] == "Camelid Field Notes" and notes["language"] == "fi"
    assert notes["authors"] == ["Aino Virtanen", "Mikko Lahti"]
    assert notes["meta"]["tags"] == ["llama", "alpaca"]
    assert sources["lamas.txt"]["meta"] == {} and sources["lamas.txt"]["authors"] is None


@pytest.mark.integration
def test_a_dataset_from_before_metadata_answers_and_gains_it_on_its_next_run(
    prefect_backend, tmp_path
):
    corpus = tmp_path / "docs"
    corpus.mkdir()
    for name in ("notes.md", "survey.html", "lamas.txt"):
        (corpus / name).write_bytes(file_bytes(name))
    uri = str(tmp_path / "index")
    ingest(source_dir=str(corpus), index_uri=uri, model="hash:64")
    dataset = Dataset(uri)
    for table in (CHUNKS_TABLE, DOCUMENTS_TABLE):  # as the layout was before metadata
        dataset._table(table).drop_columns(list(ADDED_COLUMNS[table]))

    old = Searcher(Dataset(uri))
    hits = old.search("llamas", SearchParams(k=10, mode="vector"))
    assert {hit.doc_id for hit in hits} == {"notes.md", "survey.html", "lamas.txt"}
    assert all(hit.authors == [] and hit.language is None for hit in hits)
    for option, flag in ((dict(author="aino"), "--author"), (dict(lang="fi"), "--lang")):
        with pytest.raises(DatasetError, match=f"before document metadata.*{flag}.*ingest"):
            old.search("llamas", SearchParams(k=10, mode="vector", **option))
    with pytest.raises(DatasetError, match="no meta column"):
        old.search("llamas", SearchParams(k=10, mode="vector", meta=["status=draft"]))
    assert "authors" not in list_sources(old)[0]

    again = ingest(source_dir=str(corpus), index_uri=uri, model="hash:64")
    assert again.indexed == 3 and again.chunks_embedded == 0, "read again, vectors kept"
    assert found(uri, author="aino") == {"notes.md"}
    assert found(uri, meta=["status=draft"]) == {"notes.md"}
    assert found(uri, lang="de") == {"lamas.txt"}


def test_a_document_that_declares_no_language_gets_the_one_detected():
    from .conftest import SAMPLE

    sources = discover(SAMPLE / "rust-book").files[:3]
    assert {load_document(source).metadata.language for source in sources} == {"en"}
