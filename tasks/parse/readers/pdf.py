"""PDF files: the text layer through `partition_pdf(strategy="fast")`, pages without one read by
OCR (tasks/parse/ocr.py) unless OCR is off; the metadata from the information dictionary and
the catalog's /Lang (`pdf_metadata` below). OCR on or off and its time budget are the PDF
reader's own options (`PdfOptions`, under "pdf" in the read options); what OCR did comes back
as the reading's OCR'd pages and seconds, and a note naming the pages it had no time for."""

from __future__ import annotations

import io
import logging
import time
from dataclasses import dataclass
from typing import Any, Literal

from tasks.core.reasons import Reason
from tasks.core.records import Block, Metadata, SourceFile
from tasks.parse.elements import elements_to_blocks
from tasks.parse.errors import LoadError
from tasks.parse.metadata import from_keys, language_tag, meta_json, one_line
from tasks.parse.ocr import OcrResult, ocr_pdf
from tasks.parse.registry import Format, Reading, ReadOptions, register
from tasks.parse.unstructured_offline import check_pdf_support

# pypdf (which partition_pdf reads with) warns on its logger about what is damaged in a file
# ("EOF marker not found"); a parser process configures no logging, so each warning came out
# as a bare line in the run's output. What was wrong is the file's reason and message.
logging.getLogger("pypdf").setLevel(logging.ERROR)


@dataclass(frozen=True)
class PdfOptions:
    """How to read PDFs: what LoadSettings says (--ocr, --parse-timeout) in this reader's terms."""

    ocr: Literal["auto", "off"] = "auto"
    ocr_budget: float = 0.0  # seconds after which no further page of a file is OCR'd; 0 = none


# --- Metadata ----------------------------------------------------------------------------------


def pdf_metadata(pdf: Any) -> Metadata:
    """What an open pikepdf.Pdf's information dictionary and catalog (/Lang) say."""
    declared: dict[str, Any] = {}
    try:
        for key, value in pdf.docinfo.items():
            text = one_line(value)
            if text:
                declared[str(key).lstrip("/")] = text
        lang = pdf.Root.get("/Lang")
    except Exception:  # noqa: BLE001 - a damaged info dictionary is no reason to fail the PDF
        return Metadata(meta=meta_json(declared))
    found = from_keys(
        declared,
        {
            "title": ("title",),
            "authors": ("author",),
            "created": ("creationdate",),
            "modified": ("moddate",),
        },
    )
    language = language_tag(str(lang)) if lang is not None else None
    return Metadata(found.title, found.authors, found.created, found.modified, language, found.meta)


# --- Reading -----------------------------------------------------------------------------------


def _has_text(elements: list[Any]) -> bool:
    return any((element.text or "").strip() for element in elements)


def _text_layer(data: bytes) -> list[Any]:
    from unstructured.partition.pdf import partition_pdf

    return partition_pdf(file=io.BytesIO(data), strategy="fast", languages=["eng"])


def _add_ocr(
    blocks: list[Block], data: bytes, options: PdfOptions, deadline: float | None
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


def _reading(blocks: list[Block], result: OcrResult, metadata: Metadata) -> Reading:
    """The reading of a PDF whose blocks came out, with what OCR did."""
    notes: tuple[str, ...] = ()
    if result.skipped:  # indexed, but not whole: the ledger says which pages are missing
        pages = ", ".join(map(str, result.skipped))
        notes = (f"OCR stopped at the time budget (--parse-timeout); pages not read: {pages}",)
    return Reading(
        blocks,
        notes=notes,
        metadata=metadata,
        ocr_pages=result.page_numbers,
        ocr_seconds=result.seconds,
    )


def read_pdf(data: bytes, options: PdfOptions) -> Reading:
    """Blocks of a PDF's text layer and of its pages read by OCR, and its metadata, with clear
    reasons when there are no blocks.

    An encrypted PDF is opened with the empty user password or fails as `encrypted`. When the
    text layer yields nothing (e.g. a truncated file with a broken cross-reference table),
    the PDF is rebuilt by qpdf and parsed once more. Pages without text whose images cover
    much of the page are read by OCR (unless it is off). A PDF that yields no text ends
    `no_text_layer` when its pages hold images (OCR read nothing), `ocr_off` when they hold
    images and OCR is off, and `no_text` otherwise.
    """
    import pikepdf

    if b"%PDF-" not in data[:1024]:
        raise LoadError(Reason.NOT_A_PDF, "file has a .pdf name but no PDF header")
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
            return _reading(*_add_ocr(blocks, data, options, deadline), Metadata())
        raise LoadError(Reason.DAMAGED_PDF, str(exc).split(": ", 1)[-1]) from None
    with pdf:
        metadata = pdf_metadata(pdf)
        elements = _text_layer(data)
        if not _has_text(elements):
            rebuilt = io.BytesIO()
            pdf.save(rebuilt)
            data = rebuilt.getvalue()
            elements = _text_layer(data)
        blocks, result = _add_ocr(elements_to_blocks(elements), data, options, deadline)
        if blocks:
            return _reading(blocks, result, metadata)
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


def _read(source: SourceFile, data: bytes, options: ReadOptions) -> Reading:
    return read_pdf(data, options.of("pdf", PdfOptions))


register(
    Format("pdf", "application/pdf", (".pdf",)),
    _read,
    (
        Reason.NOT_A_PDF,
        Reason.ENCRYPTED,
        Reason.DAMAGED_PDF,
        Reason.NO_TEXT_LAYER,
        Reason.OCR_OFF,
        Reason.NO_TEXT,
    ),
    warm_up=check_pdf_support,
    code=(
        "tasks.parse.unstructured_offline",
        "tasks.parse.ocr",
        "tasks.parse.elements",
        "tasks.parse.metadata",
    ),
)
