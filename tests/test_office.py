"""Word, PowerPoint and Excel files: headings, slides and sheets; encrypted, legacy and damaged
files each fail with their own reason. The documents are made by the tests
(tests/office_files.py: python-docx, python-pptx, openpyxl)."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from tasks.core.reasons import Reason, Status
from tasks.core.records import Document
from tasks.ingest.discover import discover
from tasks.parse.document import load_document
from tasks.parse.formats import TYPES
from tasks.text.split import SplitSettings, split_document

from .office_files import MAKERS, SLIDES


@pytest.fixture(scope="module")
def office_files() -> dict[str, bytes]:
    return {kind: make() for kind, make in MAKERS.items()}


def load_bytes(tmp_path: Path, name: str, data: bytes) -> Document:
    (tmp_path / name).write_bytes(data)
    source = next(s for s in discover(tmp_path).files if s.doc_id == name)
    return load_document(source)


def test_office_files_are_discovered_with_their_types(tmp_path, office_files):
    for kind, data in office_files.items():
        (tmp_path / f"file.{kind}").write_bytes(data)
    (tmp_path / "~$file.docx").write_bytes(b"owner file of an open document")
    found = {s.doc_id: s.mime_type for s in discover(tmp_path).files}
    assert found == {f"file.{kind}": TYPES[kind] for kind in ("docx", "pptx", "xlsx")}


def test_docx_headings_make_the_heading_path(tmp_path, office_files):
    doc = load_bytes(tmp_path, "report.docx", office_files["docx"])
    assert doc.status == Status.INDEXED and doc.title == "Annual Report"
    by_text = {block.text: block for block in doc.blocks}
    founded = by_text["The company was founded in 1999 in Helsinki."]
    assert (founded.section, founded.heading_level) == ("Introduction > Background", 2)
    table = by_text["Region | Sales\nNorth | 120\nSouth | 95"]
    assert table.section == "Results"
    assert by_text["First bullet point"].section == "Results"
    assert "Confidential header" not in by_text and "Page footer text" not in by_text
    assert all(block.page_number is None for block in doc.blocks)


def test_pptx_slides_are_pages_and_their_titles_sections(tmp_path, office_files):
    doc = load_bytes(tmp_path, "deck.pptx", office_files["pptx"])
    assert doc.status == Status.INDEXED and doc.title == "Quarterly Review"
    places = {block.text: (block.section, block.page_number) for block in doc.blocks}
    for number, (title, bullets) in enumerate(SLIDES, start=1):
        assert places[title] == (title, number)
        for bullet in bullets:  # body bullets, not headings, whatever unstructured calls them
            assert places[bullet] == (title, number)
        assert places[f"Speaker notes for slide {number}"] == (title, number)
    chunks = split_document(doc, SplitSettings()).chunks
    assert [(c.page_number, c.section) for c in chunks] == [
        (number, title) for number, (title, _) in enumerate(SLIDES, start=1)
    ], "a chunk never spans two slides"


def test_xlsx_sheets_are_sections_with_rows_of_cells(tmp_path, office_files):
    doc = load_bytes(tmp_path, "book.xlsx", office_files["xlsx"])
    assert doc.status == Status.INDEXED
    assert [(block.section, block.text) for block in doc.blocks] == [
        ("Budget", "Item | Cost\nServers | 1200\nLicences | 300"),
        ("Staff", "Name | Role\nAino | Engineer\nMikko | Designer"),
    ]


def encrypt(data: bytes) -> bytes:
    from msoffcrypto.format.ooxml import OOXMLFile

    out = io.BytesIO()
    OOXMLFile(io.BytesIO(data)).encrypt("secret", out)
    return out.getvalue()


def rewrite(data: bytes, change) -> bytes:
    """The archive with each member passed through change(name, bytes) (None drops it)."""
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for item in source.infolist():
            body = change(item.filename, source.read(item.filename))
            if body is not None:
                target.writestr(item, body)
    return out.getvalue()


MAIN_XML = {
    "docx": "word/document.xml",
    "pptx": "ppt/slides/slide1.xml",
    "xlsx": "xl/worksheets/sheet1.xml",
}


def damaged(data: bytes, kind: str, how: str) -> bytes:
    middle = len(data) // 3
    if how == "truncated":
        return data[: len(data) // 2]
    if how == "not_a_zip":
        return b"not a zip file\n" * 20
    if how == "bad_crc":
        return data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]
    if how == "broken_xml":
        return rewrite(
            data, lambda name, body: body[: len(body) // 2] if name == MAIN_XML[kind] else body
        )
    if how == "no_content_types":
        return rewrite(data, lambda name, body: None if name == "[Content_Types].xml" else body)
    raise ValueError(how)


@pytest.mark.parametrize("kind", ["docx", "pptx", "xlsx"])
def test_password_protected_office_files_fail_as_encrypted(tmp_path, office_files, kind):
    doc = load_bytes(tmp_path, f"secret.{kind}", encrypt(office_files[kind]))
    assert (doc.status, doc.reason) == (Status.FAILED, Reason.ENCRYPTED), doc.message


@pytest.mark.parametrize("kind", ["docx", "pptx", "xlsx"])
@pytest.mark.parametrize(
    "how", ["truncated", "not_a_zip", "bad_crc", "broken_xml", "no_content_types"]
)
def test_damaged_office_files_fail_as_damaged(tmp_path, office_files, kind, how):
    doc = load_bytes(tmp_path, f"broken.{kind}", damaged(office_files[kind], kind, how))
    assert (doc.status, doc.reason) == (Status.FAILED, Reason.DAMAGED_OFFICE_FILE), doc.message


def test_a_legacy_binary_file_under_a_docx_name_fails_as_legacy(tmp_path, office_files):
    # An OLE compound file without the encryption streams: what a renamed .doc looks like.
    ole = encrypt(office_files["docx"]).replace(
        "EncryptionInfo".encode("utf-16-le"), "XncryptionInfo".encode("utf-16-le")
    )
    doc = load_bytes(tmp_path, "old.docx", ole)
    assert (doc.status, doc.reason) == (Status.FAILED, Reason.LEGACY_OFFICE_FORMAT), doc.message
