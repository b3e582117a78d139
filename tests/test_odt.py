"""OpenDocument text (.odt) through unstructured's partition_odt and the bundled pandoc:
headings, tables, damaged and encrypted files, discovery and `--type odt`."""

from __future__ import annotations

import io
import zipfile

import pytest

from tasks.core.reasons import Reason, Status
from tasks.ingest.discover import discover
from tasks.parse.formats import TYPES
from tasks.parse.registry import reader_for

from .document_files import heading_places, load_named, make_odt, type_filter_hits


@pytest.fixture(scope="module")
def odt() -> bytes:
    return make_odt()


def test_odt_headings_make_the_heading_path_and_tables_rows(tmp_path, odt):
    places = heading_places(tmp_path, "camelids.odt", odt)
    assert places["Region | Herds\nNorth | 120\nSouth | 95"] == ("Alpacas", 1)


def rezip(data: bytes, change: dict[str, bytes | None]) -> bytes:
    """The archive with members replaced (bytes) or removed (None)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            if info.filename not in change:
                target.writestr(info, source.read(info))
        for name, member in change.items():
            if member is not None:
                target.writestr(name, member)
    return out.getvalue()


def test_broken_odt_files_fail_with_their_reasons(tmp_path, odt):
    manifest = zipfile.ZipFile(io.BytesIO(odt)).read("META-INF/manifest.xml")
    encrypted_manifest = manifest.replace(
        b"</manifest:manifest>",
        b'<manifest:file-entry manifest:full-path="x.xml" manifest:media-type="text/xml">'
        b'<manifest:encryption-data manifest:checksum-type="SHA1" manifest:checksum="AA==">'
        b"</manifest:encryption-data></manifest:file-entry></manifest:manifest>",
    )
    cases = {
        "text.odt": (b"plain words, not an archive", Reason.DAMAGED_FILE),
        "no-content.odt": (rezip(odt, {"content.xml": None}), Reason.DAMAGED_FILE),
        "truncated.odt": (odt[: len(odt) // 2], Reason.DAMAGED_FILE),
        "bad-xml.odt": (rezip(odt, {"content.xml": b"<office:doc"}), Reason.DAMAGED_FILE),
        "locked.odt": (
            rezip(odt, {"META-INF/manifest.xml": encrypted_manifest}),
            Reason.ENCRYPTED,
        ),
    }
    for name, (data, _) in cases.items():
        (tmp_path / name).write_bytes(data)
    reader = reader_for(TYPES["odt"])
    assert reader is not None
    for name, (_, reason) in cases.items():
        doc = load_named(tmp_path, name)
        assert (doc.status, doc.reason) == (Status.FAILED, reason), (name, doc.error)
        assert doc.message, name
        assert reason in reader.reasons


def test_odt_files_are_discovered_and_filtered_by_type(tmp_path, odt):
    files = {"camelids.odt": odt, "notes.md": b"# Notes\n\nLlamas again.\n"}
    (tmp_path / "camelids.odt").write_bytes(odt)
    assert [(s.doc_id, s.mime_type) for s in discover(tmp_path).files] == [
        ("camelids.odt", "application/vnd.oasis.opendocument.text")
    ]
    assert type_filter_hits(tmp_path, files, "odt") == {"camelids.odt"}
