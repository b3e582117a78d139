"""Parse one file into a document with unstructured's partitioners, fully offline.

Markdown, HTML and plain text are decoded (tasks/ingest/decode.py) and handed to unstructured
as text; what the bytes are beats the file name: a .md or .txt file that holds HTML is
partitioned as HTML, and one that holds XML (an RSS feed saved as .md) becomes the text of its
elements. PDFs go to `partition_pdf(strategy="fast")`, which reads the text layer; pages
without one are read by OCR (tasks/ingest/ocr.py) unless OCR is off. Word, PowerPoint and
Excel files go to tasks/ingest/office.py. Headings become a section path that every following
block carries until a heading of the same or a higher level. A file that cannot be parsed
becomes a document with its reason, never an exception.
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from tasks.core.formats import OFFICE_KINDS
from tasks.core.reasons import Reason
from tasks.core.records import Block, Document, SourceFile, sha256_hex
from tasks.ingest.decode import decode_bytes, looks_binary, xml_text_blocks
from tasks.ingest.errors import LoadError
from tasks.ingest.ocr import OcrResult, ocr_pdf
from tasks.ingest.office import load_office
from tasks.ingest.unstructured_offline import (
    check_pdf_support,
    install_unstructured_nlp,
    sentence_pipeline,
)

OcrMode = Literal["auto", "off"]


@dataclass(frozen=True)
class ReadOptions:
    """How to read files: what LoadSettings says, in the terms of this module."""

    ocr: OcrMode = "auto"
    ocr_budget: float = 0.0  # seconds after which no further page of a file is OCR'd; 0 = none


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


def _text_layer(data: bytes) -> list[Any]:
    from unstructured.partition.pdf import partition_pdf

    return partition_pdf(file=io.BytesIO(data), strategy="fast", languages=["eng"])


def _add_ocr(
    blocks: list[Block], data: bytes, options: ReadOptions, deadline: float | None
) -> tuple[list[Block], OcrResult]:
    """The text-layer blocks with the OCR'd pages' blocks merged in, in page order."""
    import pypdfium2 as pdfium

    if options.ocr == "off":
        return blocks, OcrResult()
    text_pages = {block.page_number for block in blocks if block.page_number}
    try:
        result = ocr_pdf(data, skip=text_pages, deadline=deadline)
    except pdfium.PdfiumError:
        return blocks, OcrResult()  # pdfium cannot open what pdfminer could read
    read = [
        Block(paragraph, page_number=page.page_number, ocr=True)
        for page in result.pages
        for paragraph in page.paragraphs
    ]
    return sorted(blocks + read, key=lambda block: block.page_number or 0), result


def read_pdf(data: bytes, options: ReadOptions) -> tuple[list[Block], OcrResult]:
    """Blocks of a PDF's text layer and of its pages read by OCR, with clear reasons when
    there are none.

    An encrypted PDF is opened with the empty user password or fails as `encrypted`. When the
    text layer yields nothing (e.g. a truncated file with a broken cross-reference table),
    the PDF is rebuilt by qpdf and parsed once more. Pages without text whose images cover
    much of the page are read by OCR (unless it is off). A PDF that yields no text ends
    `no_text_layer` when its pages hold images (OCR read nothing), `ocr_off` when they hold
    images and OCR is off, and `no_text` otherwise.
    """
    import pikepdf

    check_pdf_support()
    deadline = time.monotonic() + options.ocr_budget if options.ocr_budget else None
    try:
        pdf = pikepdf.open(io.BytesIO(data))  # tries the empty password, repairs what it can
    except pikepdf.PasswordError:
        raise LoadError(
            Reason.ENCRYPTED, "the PDF needs a password (the empty one was tried)"
        ) from None
    except pikepdf.PdfError as exc:
        blocks = elements_to_blocks(_text_layer(data))  # beyond qpdf's repair; pdfminer may
        if blocks:  # still read some of it
            return _add_ocr(blocks, data, options, deadline)
        raise LoadError(Reason.DAMAGED_PDF, str(exc).split(": ", 1)[-1]) from None
    with pdf:
        elements = _text_layer(data)
        if not _has_text(elements):
            rebuilt = io.BytesIO()
            pdf.save(rebuilt)
            data = rebuilt.getvalue()
            elements = _text_layer(data)
        blocks, result = _add_ocr(elements_to_blocks(elements), data, options, deadline)
        if blocks:
            return blocks, result
        pages = len(pdf.pages)
        has_images = any(len(page.images) for page in pdf.pages)
    if result.pages:
        message = f"OCR read no text on the {len(result.pages)} page(s) without a text layer"
        raise LoadError(Reason.NO_TEXT_LAYER, message)
    if has_images and options.ocr == "off":
        raise LoadError(Reason.OCR_OFF, "the pages are images with no text layer; OCR is off")
    if has_images:
        message = "the pages are images with no text layer, too small or too late to OCR"
        raise LoadError(Reason.NO_TEXT_LAYER, message)
    raise LoadError(Reason.NO_TEXT, f"no text found on {pages} page(s)")


def read_text_file(source: SourceFile, data: bytes) -> list[Block]:
    """Blocks of a Markdown, HTML or plain-text file; HTML or XML content wins over the name."""
    if data.startswith(b"%PDF"):
        raise LoadError(Reason.NOT_A_TEXT_DOCUMENT, "file is a PDF with a text file name")
    decoded = decode_bytes(data)
    text = decoded.text
    if looks_binary(text):
        raise LoadError(Reason.NOT_A_TEXT_DOCUMENT, "file content is binary, not text")
    if not text.strip():
        return []
    if decoded.markup == "xml":
        return [Block(block) for block in xml_text_blocks(text)]
    if decoded.markup == "html" or source.mime_type == "text/html":
        from unstructured.partition.html import partition_html

        elements = partition_html(text=_strip_html_chrome(text), languages=NO_LANGUAGE_DETECTION)
    elif source.mime_type == "text/markdown":
        from unstructured.partition.md import partition_md

        elements = partition_md(text=text, languages=NO_LANGUAGE_DETECTION)
    else:
        from unstructured.partition.text import partition_text

        elements = partition_text(text=text, languages=NO_LANGUAGE_DETECTION)
    return elements_to_blocks(elements)


def read_blocks(
    source: SourceFile, data: bytes, options: ReadOptions
) -> tuple[list[Block], OcrResult]:
    """The blocks of one file by its MIME type, and what OCR did on it."""
    install_unstructured_nlp()
    if source.mime_type == "application/pdf":
        if b"%PDF-" not in data[:1024]:
            raise LoadError(Reason.NOT_A_PDF, "file has a .pdf name but no PDF header")
        return read_pdf(data, options)
    if source.mime_type in OFFICE_KINDS:
        return load_office(data, OFFICE_KINDS[source.mime_type]), OcrResult()
    return read_text_file(source, data), OcrResult()


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
    """Import every partitioner and build the sentence splitter now, not on the first file.

    The OCR engine is built on the first page that needs it: most runs have none."""
    import unstructured.partition.docx  # noqa: F401
    import unstructured.partition.html  # noqa: F401
    import unstructured.partition.md  # noqa: F401
    import unstructured.partition.pptx  # noqa: F401
    import unstructured.partition.text  # noqa: F401
    import unstructured.partition.xlsx  # noqa: F401

    install_unstructured_nlp()
    sentence_pipeline()
    check_pdf_support()


def load_document(source: SourceFile, options: ReadOptions | None = None) -> Document:
    """Read and partition one file; one that cannot be loaded becomes an empty or failed
    document with its reason."""
    options = options or ReadOptions()
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
        blocks, ocr = read_blocks(source, data, options)
    except LoadError as exc:
        return Document.not_indexed(source, exc.reason, exc.message)
    except Exception as exc:  # noqa: BLE001 - any parser failure is this file's failure
        return Document.not_indexed(source, Reason.PARSE_ERROR, f"{type(exc).__name__}: {exc}")
    if not blocks:
        return Document.not_indexed(source, Reason.NO_TEXT, "no text found in the file")
    first_heading = next((b.section.split(" > ")[-1] for b in blocks if b.section), None)
    message = ""
    if ocr.skipped:  # indexed, but not whole: the ledger says which pages are missing
        pages = ", ".join(map(str, ocr.skipped))
        message = f"OCR stopped at the time budget (--parse-timeout); pages not read: {pages}"
    return Document(
        source,
        first_heading or source.title,
        tuple(blocks),
        message=message,
        ocr_pages=ocr.page_numbers,
        ocr_seconds=round(ocr.seconds, 3),
    )
