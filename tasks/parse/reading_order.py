"""OCR'd text boxes in reading order (tasks/parse/ocr.py reads a page into them).

`reading_order` deskews the boxes by their median angle, cuts the page into blocks with a
recursive XY cut (a column gutter only where both sides are taller than a line), groups each
block's boxes into lines and merges blocks that sit close below one another in the same column
into paragraphs. Segments of a line are joined with a space (none between two CJK characters,
`tasks.core.scripts.is_cjk`); a paragraph's lines with a space, or with nothing in Chinese or
Japanese text.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tasks.core.scripts import is_cjk


@dataclass(frozen=True)
class Box:
    """One recognised text segment: corners in pixels, clockwise from the top left."""

    points: tuple[tuple[float, float], ...]
    text: str
    score: float


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
