"""PDFs with scanned pages, made from the sample PDFs: a page rendered to a greyscale image and
wrapped in an image-only PDF page, alone or between pages that keep their text layer."""

from __future__ import annotations

import io
from pathlib import Path

from .conftest import SAMPLE

R_FAQ = SAMPLE / "r-manuals" / "R-FAQ.pdf"
CTEX_FAQ = SAMPLE / "ctex" / "ctex-faq.pdf"


def page_text(path: Path, page_number: int) -> str:
    """The text layer of one page (1-based)."""
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(str(path))
    try:
        textpage = pdf[page_number - 1].get_textpage()
        return str(textpage.get_text_range())
    finally:
        pdf.close()


def scanned_page(path: Path, page_number: int, dpi: int = 150, top: float = 1.0) -> bytes:
    """A one-page PDF holding only an image of the page (its top `top` share), no text."""
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(str(path))
    try:
        image = pdf[page_number - 1].render(scale=dpi / 72, grayscale=True).to_pil()
    finally:
        pdf.close()
    image = image.convert("L").crop((0, 0, image.width, int(image.height * top)))
    out = io.BytesIO()
    image.save(out, "PDF", resolution=float(dpi))
    return out.getvalue()


def with_scan_between(path: Path, before: int, scan: bytes, after: int) -> bytes:
    """[page `before` of `path`, the scanned page, page `after`]: page 2 has no text layer."""
    import pypdfium2 as pdfium

    new = pdfium.PdfDocument.new()
    source = pdfium.PdfDocument(str(path))
    scanned = pdfium.PdfDocument(scan)
    try:
        new.import_pages(source, [before - 1])
        new.import_pages(scanned, [0])
        new.import_pages(source, [after - 1])
        out = io.BytesIO()
        new.save(out)
        return out.getvalue()
    finally:
        for document in (new, source, scanned):
            document.close()
