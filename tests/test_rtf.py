"""Rich Text Format (.rtf) through unstructured's partition_rtf and the bundled pandoc:
headings, a file that is not RTF, discovery and `--type rtf`."""

from __future__ import annotations

import pytest

from tasks.core.reasons import Reason, Status
from tasks.ingest.discover import discover
from tasks.parse.formats import TYPES
from tasks.parse.registry import reader_for

from .document_files import heading_places, load_named, make_rtf, type_filter_hits


@pytest.fixture(scope="module")
def rtf() -> bytes:
    return make_rtf()


def test_rtf_headings_make_the_heading_path(tmp_path, rtf):
    places = heading_places(tmp_path, "camelids.rtf", rtf)
    assert any("North" in text and "120" in text for text in places), "the table's cells"


def test_broken_rtf_files_fail_with_their_reason(tmp_path, rtf):
    cases = {
        "words.rtf": b"plain words, no RTF header",
        "binary.rtf": bytes(range(256)) * 4,
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
    reader = reader_for(TYPES["rtf"])
    assert reader is not None
    for name in cases:
        doc = load_named(tmp_path, name)
        assert (doc.status, doc.reason) == (Status.FAILED, Reason.DAMAGED_FILE), name
        assert "rtf" in doc.message
        assert doc.reason in reader.reasons
    (tmp_path / "empty-body.rtf").write_bytes(b"{\\rtf1\\ansi }")
    doc = load_named(tmp_path, "empty-body.rtf")
    assert (doc.status, doc.reason) == (Status.EMPTY, Reason.NO_TEXT)


def test_rtf_files_are_discovered_and_filtered_by_type(tmp_path, rtf):
    (tmp_path / "camelids.rtf").write_bytes(rtf)
    assert [(s.doc_id, s.mime_type) for s in discover(tmp_path).files] == [
        ("camelids.rtf", "application/rtf")
    ]
    files = {"camelids.rtf": rtf, "notes.md": b"# Notes\n\nLlamas again.\n"}
    assert type_filter_hits(tmp_path, files, "rtf") == {"camelids.rtf"}
