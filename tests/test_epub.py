"""E-books (.epub) through unstructured's partition_epub and the bundled pandoc: chapters and
sections, damaged and DRM-encrypted books, discovery and `--type epub`."""

from __future__ import annotations

import pytest

from tasks.core.reasons import Reason, Status
from tasks.ingest.discover import discover
from tasks.parse.formats import TYPES
from tasks.parse.registry import reader_for

from .document_files import heading_places, load_named, make_epub, type_filter_hits
from .test_odt import rezip


@pytest.fixture(scope="module")
def epub() -> bytes:
    return make_epub()


def test_epub_chapters_make_the_heading_path(tmp_path, epub):
    heading_places(tmp_path, "camelids.epub", epub, title="Camelids")  # the book's own title


ENCRYPTION = b"""<?xml version="1.0"?>
<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container"
            xmlns:enc="http://www.w3.org/2001/04/xmlenc#">
  <enc:EncryptedData>
    <enc:EncryptionMethod Algorithm="%s"/>
    <enc:CipherData><enc:CipherReference URI="EPUB/text/ch001.xhtml"/></enc:CipherData>
  </enc:EncryptedData>
</encryption>"""


AES = b"http://www.w3.org/2001/04/xmlenc#aes128-cbc"  # DRM encrypts the text
FONT_OBFUSCATION = b"http://www.idpf.org/2008/embedding"  # EPUB's rule for embedded fonts


def test_broken_and_encrypted_epubs_fail_with_their_reasons(tmp_path, epub):
    drm = rezip(epub, {"META-INF/encryption.xml": ENCRYPTION % AES})
    cases = {
        "words.epub": (b"plain words, not an archive", Reason.DAMAGED_FILE),
        "no-container.epub": (rezip(epub, {"META-INF/container.xml": None}), Reason.DAMAGED_FILE),
        "truncated.epub": (epub[: len(epub) // 2], Reason.DAMAGED_FILE),
        "bad-package.epub": (
            rezip(epub, {"META-INF/container.xml": b"<container"}),
            Reason.DAMAGED_FILE,
        ),
        "drm.epub": (drm, Reason.ENCRYPTED),
    }
    for name, (data, _) in cases.items():
        (tmp_path / name).write_bytes(data)
    reader = reader_for(TYPES["epub"])
    assert reader is not None
    for name, (_, reason) in cases.items():
        doc = load_named(tmp_path, name)
        assert (doc.status, doc.reason) == (Status.FAILED, reason), (name, doc.error)
        assert reason in reader.reasons
    # Fonts obfuscated by the EPUB rules leave the text readable.
    fonts = ENCRYPTION.replace(b"text/ch001.xhtml", b"fonts/a.otf") % FONT_OBFUSCATION
    obfuscated = rezip(epub, {"META-INF/encryption.xml": fonts})
    (tmp_path / "fonts.epub").write_bytes(obfuscated)
    assert load_named(tmp_path, "fonts.epub").status == Status.INDEXED


def test_epub_files_are_discovered_and_filtered_by_type(tmp_path, epub):
    (tmp_path / "camelids.epub").write_bytes(epub)
    assert [(s.doc_id, s.mime_type) for s in discover(tmp_path).files] == [
        ("camelids.epub", "application/epub+zip")
    ]
    files = {"camelids.epub": epub, "notes.md": b"# Notes\n\nLlamas again.\n"}
    assert type_filter_hits(tmp_path, files, "epub") == {"camelids.epub"}
