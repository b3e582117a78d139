"""E-books (.epub) through unstructured's `partition_epub`: pandoc converts the book to HTML,
whose headings (the chapters' and sections') make the heading path as in HTML files.

Told from the bytes first: a file that is not an intact ZIP archive with the EPUB container
(META-INF/container.xml) is `damaged_file`; a book whose content is encrypted (DRM; fonts
obfuscated by the EPUB rules are fine) is `encrypted`; pandoc's own errors are `damaged_file`.
Metadata: the package document's (OPF) <metadata> (`epub_metadata` below).
"""

from __future__ import annotations

import re

from tasks.core.reasons import Reason
from tasks.core.records import Block, Metadata
from tasks.parse.archives import check_zip, read_member
from tasks.parse.elements import elements_to_blocks
from tasks.parse.errors import LoadError
from tasks.parse.metadata import element_values, from_keys, local_name, one_line, xml_root
from tasks.parse.pandoc import pandoc_elements, register_pandoc_format
from tasks.parse.registry import Format

FORMAT = Format("epub", "application/epub+zip", (".epub",))

# --- Metadata ----------------------------------------------------------------------------------


def epub_metadata(data: bytes) -> Metadata:
    """What an EPUB's package document (OPF) says: its Dublin Core elements, and <meta>
    elements by their property (EPUB 3) or name (EPUB 2)."""
    container = xml_root(read_member(data, "META-INF/container.xml"))
    if container is None:
        return Metadata()
    path = next(
        (e.get("full-path") for e in container.iter() if local_name(e.tag) == "rootfile"), None
    )
    package = xml_root(read_member(data, path)) if path else None
    block = (
        next((e for e in package.iter() if local_name(e.tag) == "metadata"), None)
        if package is not None
        else None
    )
    if block is None:
        return Metadata()
    declared = element_values(e for e in block if local_name(e.tag) != "meta")
    for element in block:
        if local_name(element.tag) != "meta":
            continue
        if element.get("refines"):
            continue  # a detail of another element (a creator's role), not of the book
        key = element.get("property") or element.get("name")
        value = one_line(element.text) or one_line(element.get("content"))
        if key and value and key not in declared:
            declared[key] = value
    return from_keys(
        declared,
        {
            "title": ("title",),
            "authors": ("creator",),
            "created": ("date",),
            "modified": ("dcterms:modified",),
            "language": ("language",),
        },
    )


# --- Reading -----------------------------------------------------------------------------------

# What META-INF/encryption.xml may name without the text being unreadable: font obfuscation
# (EPUB 3 and Adobe's).
FONT_OBFUSCATION = {b"http://www.idpf.org/2008/embedding", b"http://ns.adobe.com/pdf/enc#RC"}
_ENCRYPTION_METHOD = re.compile(rb"EncryptionMethod\b[^>]*\bAlgorithm\s*=\s*[\"']([^\"']+)")


def read_epub(data: bytes) -> list[Block]:
    """The blocks of an .epub file; LoadError with its reason when unreadable."""
    check_zip(data, ".epub", ("META-INF/container.xml",), Reason.DAMAGED_FILE)
    encryption = read_member(data, "META-INF/encryption.xml") or b""
    if set(_ENCRYPTION_METHOD.findall(encryption)) - FONT_OBFUSCATION:
        raise LoadError(Reason.ENCRYPTED, "the e-book's content is encrypted (DRM)")
    from unstructured.errors import UnprocessableEntityError

    return elements_to_blocks(pandoc_elements("epub", data, (UnprocessableEntityError,)))


# What read_epub raises, and the modules besides this one and tasks/parse/pandoc.py whose
# code decides the output.
REASONS = (Reason.DAMAGED_FILE, Reason.ENCRYPTED, Reason.TOO_LARGE)
CODE = ("tasks.parse.archives", "tasks.parse.elements", "tasks.parse.metadata")
register_pandoc_format(FORMAT, read_epub, epub_metadata, REASONS, CODE)
