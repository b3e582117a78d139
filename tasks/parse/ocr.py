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
3. rapidocr returns one box per text segment; `reading_order` deskews the boxes by their
   median angle, cuts the page into blocks with a recursive XY cut (a column gutter only
   where both sides are taller than a line), groups each block's boxes into lines and merges
   blocks that sit close below one another in the same column into paragraphs. Segments of a
   line are joined with a space (none between two CJK characters, `tasks.core.scripts.is_cjk`);
   a paragraph's lines with a space, or with nothing in Chinese or Japanese text.

The direction classifier (0/180 degrees) is off: pdfium applies the page's /Rotate, upside-down
lines are rare, and the classifier flipped good lines of a Chinese page. The per-file parse
timeout of the parser process (tasks/parse/worker.py) bounds the time a long scan takes.
"""

from __future__ import annotations

import math
import os
import statistics
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from tasks.core.scripts import is_cjk

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
class Box:
    """One recognised text segment: corners in pixels, clockwise from the top left."""

    points: tuple[tuple[float, float], ...]
    text: str
    score: float


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


# -- reading order ----------------------------------------------------------------------------

# Narrowest column gutter, in median line heights (the detector's boxes are expanded, so a
# narrow gutter leaves less than a line height between boxes; word gaps never line up).
MIN_GUTTER = 0.4
# Largest vertical gap between two lines of one paragraph, in median line heights.
PARAGRAPH_GAP = 0.8


@dataclass
class _Segment:
    x0: float
    y0: float
    x1: float
    y1: float
    text: str


def _deskewed(boxes: Sequence[Box]) -> list[_Segment]:
    """Axis-aligned bounds of the boxes after rotating them back by their median angle."""
    angles = []
    for box in boxes:
        (x0, y0), (x1, y1) = box.points[0], box.points[1]
        if x1 - x0 > 2 * abs(y1 - y0) and x1 > x0:
            angles.append(math.atan2(y1 - y0, x1 - x0))
    angle = statistics.median(angles) if angles else 0.0
    cos, sin = math.cos(-angle), math.sin(-angle)
    segments = []
    for box in boxes:
        xs = [x * cos - y * sin for x, y in box.points]
        ys = [x * sin + y * cos for x, y in box.points]
        segments.append(_Segment(min(xs), min(ys), max(xs), max(ys), box.text))
    return segments


def _gaps(intervals: list[tuple[float, float]]) -> Iterator[tuple[float, float]]:
    """Empty stretches between the union of the intervals, as (start, end)."""
    intervals = sorted(intervals)
    reach = intervals[0][1]
    for low, high in intervals[1:]:
        if low > reach:
            yield reach, low
        reach = max(reach, high)


def _height(segments: list[_Segment]) -> float:
    return max(s.y1 for s in segments) - min(s.y0 for s in segments)


def _xy_cut(segments: list[_Segment], line_h: float) -> list[list[_Segment]]:
    """Blocks in reading order: cut at the widest gap; a column cut needs tall sides."""
    if len(segments) <= 1:
        return [segments]
    cuts = []  # (gap width, axis, position)
    for low, high in _gaps([(s.y0, s.y1) for s in segments]):
        cuts.append((high - low, "y", (low + high) / 2))
    for low, high in _gaps([(s.x0, s.x1) for s in segments]):
        if high - low < MIN_GUTTER * line_h:
            continue
        middle = (low + high) / 2
        left = [s for s in segments if s.x1 <= middle]
        right = [s for s in segments if s.x0 >= middle]
        if _height(left) > 1.6 * line_h and _height(right) > 1.6 * line_h:
            cuts.append((high - low, "x", middle))
    if not cuts:
        return [segments]
    _, axis, position = max(cuts, key=lambda cut: cut[0])
    if axis == "y":
        before = [(s.y0 + s.y1) / 2 < position for s in segments]
    else:
        before = [(s.x0 + s.x1) / 2 < position for s in segments]
    first = [s for s, is_before in zip(segments, before, strict=True) if is_before]
    second = [s for s, is_before in zip(segments, before, strict=True) if not is_before]
    if not first or not second:
        return [segments]
    return _xy_cut(first, line_h) + _xy_cut(second, line_h)


def _lines(block: list[_Segment]) -> list[list[_Segment]]:
    """A block's segments grouped into lines (vertical overlap), each sorted left to right."""
    lines: list[list[_Segment]] = []
    bounds: list[tuple[float, float]] = []
    for segment in sorted(block, key=lambda s: (s.y0 + s.y1) / 2):
        if lines:
            low, high = bounds[-1]
            overlap = min(high, segment.y1) - max(low, segment.y0)
            if overlap >= 0.5 * min(high - low, segment.y1 - segment.y0):
                lines[-1].append(segment)
                bounds[-1] = (min(low, segment.y0), max(high, segment.y1))
                continue
        lines.append([segment])
        bounds.append((segment.y0, segment.y1))
    return [sorted(line, key=lambda s: s.x0) for line in lines]


def _join(parts: list[str]) -> str:
    """Join pieces of text with a space, except between two CJK characters."""
    out = ""
    for part in parts:
        if out and part and not (is_cjk(out[-1]) and is_cjk(part[0])):
            out += " "
        out += part
    return out


def reading_order(boxes: Sequence[Box]) -> list[str]:
    """The boxes' text as paragraphs in reading order."""
    if not boxes:
        return []
    segments = _deskewed(boxes)
    line_h = statistics.median(s.y1 - s.y0 for s in segments) or 1.0
    paragraphs: list[list[str]] = []
    previous: tuple[float, float, float] | None = None  # x0, x1, y1 of the last block
    for block in _xy_cut(segments, line_h):
        x0, x1 = min(s.x0 for s in block), max(s.x1 for s in block)
        y0, y1 = min(s.y0 for s in block), max(s.y1 for s in block)
        lines = [_join([s.text for s in line]) for line in _lines(block)]
        if previous is not None:
            px0, px1, py1 = previous
            overlap = min(x1, px1) - max(x0, px0)
            close = 0 <= y0 - py1 < PARAGRAPH_GAP * line_h or (y0 < py1 and overlap > 0)
            if close and overlap > 0.5 * min(x1 - x0, px1 - px0):
                paragraphs[-1].extend(lines)
                previous = (min(x0, px0), max(x1, px1), max(y1, py1))
                continue
        paragraphs.append(lines)
        previous = (x0, x1, y1)
    return [_join(lines) for lines in paragraphs]


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
