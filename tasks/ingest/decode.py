"""Text files' bytes to text: BOMs, BOM-less UTF-16/32, ISO-2022-JP, then detection."""

from __future__ import annotations

import codecs

import charset_normalizer

from tasks.core.reasons import Reason
from tasks.ingest.errors import LoadError

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def _wide_encoding_without_bom(sample: bytes) -> str | None:
    """Guess BOM-less UTF-32/UTF-16 from where the zero bytes of mostly-ASCII text sit."""
    if b"\x00" not in sample:
        return None

    def zero_share(offset: int, step: int) -> float:
        column = sample[offset::step]
        return column.count(0) / len(column) if column else 0.0

    quad = [zero_share(i, 4) for i in range(4)]
    if min(quad[1:]) > 0.9 and quad[0] < 0.1:
        return "utf-32-le"
    if min(quad[:3]) > 0.9 and quad[3] < 0.1:
        return "utf-32-be"
    even, odd = zero_share(0, 2), zero_share(1, 2)
    if odd > 0.3 and even < 0.05:
        return "utf-16-le"
    if even > 0.3 and odd < 0.05:
        return "utf-16-be"
    return None


def decode_text(data: bytes) -> str:
    """Decode a text file's bytes: BOM, BOM-less UTF-16/32, UTF-8, then detection."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data.decode(encoding)
    candidates = [_wide_encoding_without_bom(data[:4096])]
    if b"\x1b$B" in data or b"\x1b$@" in data:
        candidates.append("iso2022_jp")
    candidates.append("utf-8")
    for encoding in filter(None, candidates):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    best = charset_normalizer.from_bytes(data).best()
    if best is None:
        raise LoadError(Reason.NOT_A_TEXT_DOCUMENT, "no text encoding fits the file's bytes")
    return str(best)


def looks_binary(text: str) -> bool:
    """True when decoded 'text' is mostly control characters: a binary file with a text name."""
    sample = text[:4096]
    if not sample:
        return False
    control = sum(1 for ch in sample if (ord(ch) < 32 and ch not in "\t\n\r\f") or ch == "\ufffd")
    return control / len(sample) > 0.05
