"""OCR of PDF pages that have no text layer: offline, on the CPU.

Engine: rapidocr 3 (Apache-2.0), whose wheel ships PP-OCRv6 detection and recognition models
(Chinese and English characters) as ONNX files run by onnxruntime. Their paths are handed to
it explicitly: with a model path unset, rapidocr looks the model up in its download table and
fetches anything but its default from the internet. Pages are rendered with pypdfium2.

Per page:

1. `needs_ocr`: a page that the text layer left without text, that has fewer than
   MIN_TEXT_CHARS characters in pdfium's own text layer and whose image objects cover at least
   MIN_IMAGE_COVERAGE of its area, is OCR'd. A blank page or one holding only a small logo
   costs nothing.
2. `render_scale`: rendered at DPI, enlarged to at least MIN_SIDE_PX on its short side (a
   small page holding a 2400 dpi scan must not shrink to a few hundred pixels), and capped at
   MAX_SIDE_PX on its long side and MAX_PIXELS in all, whatever the page size (a 200-inch
   poster page at 200 dpi would be a gigapixel image).
3. rapidocr returns one box per text segment; `reading_order` (tasks/parse/reading_order.py)
   makes them the page's paragraphs: blocks by a recursive XY cut, lines, then paragraphs.

The direction classifier (0/180 degrees) is off: pdfium applies the page's /Rotate, upside-down
lines are rare, and the classifier flipped good lines of a Chinese page. The per-file parse
timeout of the parser process (tasks/parse/worker.py) bounds the time a long scan takes.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from tasks.parse.reading_order import Box, reading_order

MIN_TEXT_CHARS = 16  # a page with fewer non-blank text-layer characters may need OCR
MIN_IMAGE_COVERAGE = 0.15  # share of the page area its images must cover to be OCR'd
DPI = 200.0  # nominal render resolution
MIN_SIDE_PX = 1000  # small pages are enlarged up to this short side (before the caps)
MAX_SIDE_PX = 2600  # cap on the rendered long side (also the detector's largest input side)
MAX_PIXELS = 6_000_000  # cap on the rendered area
MIN_SCORE = 0.5  # recognised segments below this confidence are dropped

# The models inside rapidocr's wheel (rapidocr/models/), passed by path.
RAPIDOCR_MODELS = {
    "Det.model_path": "PP-OCRv6_det_small.onnx",
    "Cls.model_path": "ch_ppocr_mobile_v2.0_cls_mobile.onnx",
    "Rec.model_path": "PP-OCRv6_rec_small.onnx",
}


@dataclass(frozen=True)
class OcrPage:
    """The text OCR read on one page, as paragraphs in reading order."""

    page_number: int  # 1-based
    paragraphs: tuple[str, ...]
    seconds: float  # rendering and recognition


@dataclass(frozen=True)
class OcrResult:
    """What OCR did on one PDF."""

    pages: tuple[OcrPage, ...] = ()  # every page that was OCR'd, with or without text
    seconds: float = 0.0  # rendering and recognising those pages
    skipped: tuple[int, ...] = ()  # pages that needed OCR but came after the deadline

    @property
    def page_numbers(self) -> tuple[int, ...]:
        """The pages on which OCR read text."""
        return tuple(page.page_number for page in self.pages if page.paragraphs)


# -- the engine -------------------------------------------------------------------------------

_ENGINE_LOCK = threading.Lock()


def model_paths() -> dict[str, str]:
    """rapidocr's parameters naming the model files inside its wheel (which must be there)."""
    import rapidocr

    models = Path(rapidocr.__file__).parent / "models"
    paths = {key: str(models / name) for key, name in RAPIDOCR_MODELS.items()}
    missing = [path for path in paths.values() if not Path(path).is_file()]
    if missing:
        raise RuntimeError(f"rapidocr's bundled model is missing: {missing[0]}")
    return paths


@cache
def get_engine() -> Any:
    """The OCR engine, built once per process on first use."""
    from rapidocr import RapidOCR

    params: dict[str, Any] = {
        **model_paths(),
        "Global.log_level": "warning",
        "Global.max_side_len": MAX_SIDE_PX,
        "EngineConfig.onnxruntime.intra_op_num_threads": min(4, os.cpu_count() or 1),
        "EngineConfig.onnxruntime.inter_op_num_threads": 1,
    }
    return RapidOCR(params=params)


def recognise(image: Any) -> list[Box]:
    """The text segments on an image (a numpy array, BGR or grey), in image pixels."""
    engine = get_engine()
    with _ENGINE_LOCK:  # the engine keeps per-call state: one call at a time
        out = engine(image, use_cls=False, text_score=MIN_SCORE)
    if out.boxes is None or out.txts is None:
        return []
    boxes = []
    for points, text, score in zip(out.boxes.tolist(), out.txts, out.scores, strict=True):
        if text.strip():
            corners = tuple((float(x), float(y)) for x, y in points)
            boxes.append(Box(corners, text.strip(), float(score)))
    return boxes


# -- which pages, and rendering ---------------------------------------------------------------


def _text_chars(page: Any) -> int:
    textpage = page.get_textpage()
    try:
        return sum(1 for ch in textpage.get_text_range() if not ch.isspace())
    finally:
        textpage.close()


def image_coverage(page: Any) -> float:
    """Share of the page area covered by image objects (inside forms too, clipped)."""
    import pypdfium2 as pdfium

    left, bottom, right, top = page.get_bbox()
    if right <= left or top <= bottom:
        return 0.0
    area = 0.0
    for obj in page.get_objects(filter=[pdfium.raw.FPDF_PAGEOBJ_IMAGE], max_depth=8):
        x0, y0, x1, y1 = obj.get_bounds()
        width = max(0.0, min(x1, right) - max(x0, left))
        height = max(0.0, min(y1, top) - max(y0, bottom))
        area += width * height
    return min(1.0, area / ((right - left) * (top - bottom)))


def needs_ocr(page: Any) -> bool:
    """Whether a page is an image of text rather than text (or blank)."""
    return _text_chars(page) < MIN_TEXT_CHARS and image_coverage(page) >= MIN_IMAGE_COVERAGE


def render_scale(width_pt: float, height_pt: float) -> float:
    """Pixels per point for a page of this size, within the caps."""
    short, long = sorted((max(width_pt, 1.0), max(height_pt, 1.0)))
    scale = max(DPI / 72.0, MIN_SIDE_PX / short)
    scale = min(scale, MAX_SIDE_PX / long, math.sqrt(MAX_PIXELS / (short * long)))
    # pdfium rounds the bitmap size up: keep the rounded size inside the caps too
    while math.ceil(long * scale) > MAX_SIDE_PX or (
        math.ceil(short * scale) * math.ceil(long * scale) > MAX_PIXELS
    ):
        scale *= 0.999
    return scale


def render_page(page: Any) -> Any:
    """The page as a BGR numpy array, forms and annotations drawn."""
    width, height = page.get_size()
    bitmap = page.render(scale=render_scale(width, height), may_draw_forms=True)
    try:
        array = bitmap.to_numpy().copy()  # pdfium's BGR(x) byte order, which the engine expects
    finally:
        bitmap.close()
    if array.ndim == 3 and array.shape[2] == 4:
        array = array[:, :, :3]
    return array


# -- whole documents --------------------------------------------------------------------------


def ocr_page(page: Any, page_number: int) -> OcrPage:
    """Render one page and read it."""
    started = time.perf_counter()
    paragraphs = reading_order(recognise(render_page(page)))
    return OcrPage(page_number, tuple(paragraphs), time.perf_counter() - started)


def _pages_to_read(pdf: Any, skip: set[int]) -> Iterator[tuple[int, Any]]:
    """(page number, page) of every page that needs OCR and is not in `skip`; a page that
    pdfium cannot load or inspect is passed over."""
    import pypdfium2 as pdfium

    for index in range(len(pdf)):
        if index + 1 in skip:
            continue
        try:
            page = pdf[index]
        except pdfium.PdfiumError:
            continue
        try:
            wanted = needs_ocr(page)
        except pdfium.PdfiumError:
            wanted = False
        try:
            if wanted:
                yield index + 1, page
        finally:
            page.close()


def ocr_pdf(data: bytes, skip: set[int], deadline: float | None = None) -> OcrResult:
    """OCR every page of a PDF that needs it, except the `skip` pages (1-based) that the text
    layer already read. No page is started after `deadline` (a time.monotonic() value): those
    pages are listed as `skipped`. Raises pypdfium2's PdfiumError when the PDF cannot be
    opened."""
    import pypdfium2 as pdfium

    pages, skipped = [], []
    pdf = pdfium.PdfDocument(data)
    try:
        for number, page in _pages_to_read(pdf, skip):
            if deadline is not None and time.monotonic() > deadline:
                skipped.append(number)
                continue
            try:
                pages.append(ocr_page(page, number))
            except pdfium.PdfiumError:
                continue  # pdfium cannot render it: the page stays unread
    finally:
        pdf.close()
    return OcrResult(tuple(pages), sum(page.seconds for page in pages), tuple(skipped))
