"""Parse one file into a document with unstructured's partitioners, fully offline.

Markdown, HTML and plain text are decoded (tasks/ingest/decode.py) and handed to unstructured
as text; PDFs go to `partition_pdf(strategy="fast")`, which reads the text layer. Headings
become a section path that every following block carries until a heading of the same or a
higher level. A file that cannot be parsed becomes a document with its reason, never an
exception.
"""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path
from typing import Any

from tasks.core.reasons import Reason
from tasks.core.records import Block, Document, SourceFile, sha256_hex
from tasks.ingest.decode import decode_text, looks_binary
from tasks.ingest.errors import LoadError
from tasks.ingest.unstructured_offline import (
    check_pdf_support,
    install_unstructured_nlp,
    sentence_pipeline,
)

# Element categories that are not document text.
_SKIPPED_CATEGORIES = {"Image", "PageBreak", "Header", "Footer", "PageNumber"}

# unstructured's documented switch for "no language detection": the index does not use the
# detected language, and detecting it cost a third of a Markdown file's parsing time.
NO_LANGUAGE_DETECTION = [""]

# HTML that is page chrome, not content (Sphinx's "¶" heading anchors included); removed
# before partitioning.
_HTML_CHROME_XPATH = (
    "//script | //style | //noscript | //template | //nav | //*[@role='navigation']"
    " | //a[contains(concat(' ', @class, ' '), ' headerlink ')]"
)


def _strip_html_chrome(html: str) -> str:
    """Drop scripts, styles and navigation blocks so only page content is partitioned."""
    import lxml.html

    try:
        tree = lxml.html.document_fromstring(html)
    except (ValueError, lxml.etree.ParserError):
        return html
    for node in tree.xpath(_HTML_CHROME_XPATH):
        node.drop_tree()
    return lxml.html.tostring(tree, encoding="unicode")


def _has_text(elements: list[Any]) -> bool:
    return any((element.text or "").strip() for element in elements)


def partition_pdf_bytes(data: bytes) -> list[Any]:
    """Elements of a PDF's text layer, with clear reasons when there is none.

    An encrypted PDF is opened with the empty user password or fails as `encrypted`. When the
    text layer yields nothing (e.g. a truncated file with a broken cross-reference table),
    the PDF is rebuilt by qpdf and parsed once more; a PDF whose pages hold only images is
    empty with reason `no_text_layer`.
    """
    import pikepdf
    from unstructured.partition.pdf import partition_pdf

    check_pdf_support()

    def parse(pdf_bytes: bytes) -> list[Any]:
        return partition_pdf(file=io.BytesIO(pdf_bytes), strategy="fast", languages=["eng"])

    try:
        pdf = pikepdf.open(io.BytesIO(data))  # tries the empty password, repairs what it can
    except pikepdf.PasswordError:
        raise LoadError(
            Reason.ENCRYPTED, "the PDF needs a password (the empty one was tried)"
        ) from None
    except pikepdf.PdfError as exc:
        elements = parse(data)  # beyond qpdf's repair; pdfminer may still read some of it
        if _has_text(elements):
            return elements
        raise LoadError(Reason.DAMAGED_PDF, str(exc).split(": ", 1)[-1]) from None
    with pdf:
        elements = parse(data)
        if _has_text(elements):
            return elements
        rebuilt = io.BytesIO()
        pdf.save(rebuilt)
        elements = parse(rebuilt.getvalue())
        if _has_text(elements):
            return elements
        if any(len(page.images) for page in pdf.pages):
            raise LoadError(
                Reason.NO_TEXT_LAYER, "the pages are images with no text layer (scanned?)"
            )
        raise LoadError(Reason.NO_TEXT, f"no text found on {len(pdf.pages)} page(s)")


def partition(source: SourceFile, data: bytes) -> list[Any]:
    """unstructured elements of one file, by MIME type."""
    install_unstructured_nlp()
    if source.mime_type == "application/pdf":
        if b"%PDF-" not in data[:1024]:
            raise LoadError(Reason.NOT_A_PDF, "file has a .pdf name but no PDF header")
        return partition_pdf_bytes(data)
    if data.startswith(b"%PDF"):
        raise LoadError(Reason.NOT_A_TEXT_DOCUMENT, "file is a PDF with a text file name")
    text = decode_text(data)
    if looks_binary(text):
        raise LoadError(Reason.NOT_A_TEXT_DOCUMENT, "file content is binary, not text")
    if not text.strip():
        return []
    if source.mime_type == "text/markdown":
        from unstructured.partition.md import partition_md

        return partition_md(text=text, languages=NO_LANGUAGE_DETECTION)
    if source.mime_type == "text/html":
        from unstructured.partition.html import partition_html

        return partition_html(text=_strip_html_chrome(text), languages=NO_LANGUAGE_DETECTION)
    from unstructured.partition.text import partition_text

    return partition_text(text=text, languages=NO_LANGUAGE_DETECTION)


def elements_to_blocks(elements: list[Any]) -> list[Block]:
    """Blocks with heading path, heading level and page number from unstructured elements.

    Markdown and HTML headings arrive as Title elements with `category_depth` (0 for h1);
    PDF Titles are guesses from font heuristics and carry no depth, so they stay plain text.
    """
    headings: list[tuple[int, str]] = []  # (level, text), outermost first
    blocks: list[Block] = []
    for element in elements:
        text = (element.text or "").strip()
        if not text or element.category in _SKIPPED_CATEGORIES:
            continue
        depth = element.metadata.category_depth
        if element.category == "Title" and depth is not None:
            level = depth + 1
            headings = [h for h in headings if h[0] < level] + [(level, " ".join(text.split()))]
        blocks.append(
            Block(
                text=text,
                section=" > ".join(h[1] for h in headings),
                heading_level=headings[-1][0] if headings else 0,
                page_number=element.metadata.page_number,
            )
        )
    return blocks


def warm_up() -> None:
    """Import every partitioner and build the sentence splitter now, not on the first file."""
    import unstructured.partition.html  # noqa: F401
    import unstructured.partition.md  # noqa: F401
    import unstructured.partition.text  # noqa: F401

    install_unstructured_nlp()
    sentence_pipeline()
    check_pdf_support()


def load_document(source: SourceFile) -> Document:
    """Read and partition one file; one that cannot be loaded becomes an empty or failed
    document with its reason."""
    try:
        data = Path(source.path).read_bytes()
    except FileNotFoundError:
        return Document.not_indexed(source, Reason.VANISHED, "deleted after discovery")
    except OSError as exc:
        return Document.not_indexed(source, Reason.UNREADABLE, str(exc))
    if not data:
        return Document.not_indexed(source, Reason.EMPTY_FILE, "the file has no bytes")
    digest = sha256_hex(data)
    if digest != source.content_hash:  # changed since discovery: index what we read
        source = replace(source, size=len(data), content_hash=digest)
    try:
        blocks = elements_to_blocks(partition(source, data))
    except LoadError as exc:
        return Document.not_indexed(source, exc.reason, exc.message)
    except Exception as exc:  # noqa: BLE001 - any parser failure is this file's failure
        return Document.not_indexed(source, Reason.PARSE_ERROR, f"{type(exc).__name__}: {exc}")
    if not blocks:
        return Document.not_indexed(source, Reason.NO_TEXT, "no text found in the file")
    first_heading = next((b.section.split(" > ")[-1] for b in blocks if b.section), None)
    return Document(source, first_heading or source.title, tuple(blocks))
