"""Rich Text Format (.rtf) through unstructured's `partition_rtf`: pandoc converts it to HTML,
whose headings make the heading path as in HTML files. A file that does not start with the
`{\\rtf` header, or that pandoc cannot read, is `damaged_file`. Metadata: the {\\info} group
(`rtf_metadata` below)."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from tasks.core.reasons import Reason
from tasks.core.records import Block, Metadata
from tasks.parse.elements import elements_to_blocks
from tasks.parse.errors import LoadError
from tasks.parse.metadata import from_keys, one_line
from tasks.parse.pandoc import pandoc_elements, register_pandoc_format
from tasks.parse.registry import Format

FORMAT = Format("rtf", "application/rtf", (".rtf",))

# --- Metadata ----------------------------------------------------------------------------------


# RTF's {\info} group: {\title ...}, {\author ...}, {\creatim\yr2024\mo5\dy1\hr9\min30}, ...
_RTF_INFO_FIELDS = rb"title|subject|author|operator|keywords|comment|doccomm|company|category"
_RTF_INFO_TEXT = re.compile(
    rb"\{\\(" + _RTF_INFO_FIELDS + rb")\s?((?:[^{}\\]|\\[^a-z]|\\[a-z]+-?\d* ?)*)\}"
)
_RTF_INFO_TIME = re.compile(rb"\{\\(creatim|revtim)((?:\\[a-z]+\d+\s*)+)\}")
_RTF_CODE_PAGE = re.compile(rb"\\ansicpg(\d+)")


def _rtf_text(raw: bytes, codec: str) -> str:
    """The text of an RTF group's contents: \\'hh bytes in the file's code page, \\uN
    characters, escaped braces and backslashes; other control words dropped."""
    out: list[str] = []
    for match in re.finditer(
        rb"\\'([0-9a-fA-F]{2})|\\u(-?\d+) ?(?:\\'[0-9a-fA-F]{2}|[^\\{}])?|\\([{}\\])"
        rb"|\\[a-z]+-?\d* ?|([^\\]+)",
        raw,
    ):
        hex_byte, code, escaped, text = match.groups()
        if hex_byte:
            out.append(bytes([int(hex_byte, 16)]).decode(codec, errors="replace"))
        elif code:
            out.append(chr(int(code) % 0x10000))
        elif escaped:
            out.append(escaped.decode())
        elif text:
            out.append(text.decode(codec, errors="replace"))
    return "".join(out)


def _rtf_time(raw: bytes) -> str | None:
    parts = {k.decode(): int(v) for k, v in re.findall(rb"\\([a-z]+)(\d+)", raw)}
    try:
        moment = dt.datetime(
            parts["yr"],
            parts.get("mo", 1),
            parts.get("dy", 1),
            parts.get("hr", 0),
            parts.get("min", 0),
        )
    except (KeyError, ValueError):
        return None
    return moment.isoformat()


def rtf_metadata(data: bytes) -> Metadata:
    """What an RTF file's {\\info} group says."""
    start = data.find(b"{\\info")
    if start < 0:
        return Metadata()
    info = data[start : start + 65536]
    page = _RTF_CODE_PAGE.search(data[:4096])
    codec = f"cp{page.group(1).decode()}" if page else "cp1252"
    try:
        "".encode(codec)
    except LookupError:
        codec = "cp1252"
    declared: dict[str, Any] = {}
    for key, raw in _RTF_INFO_TEXT.findall(info):
        text = one_line(_rtf_text(raw, codec))
        if text:
            declared.setdefault(key.decode(), text)
    for key, raw in _RTF_INFO_TIME.findall(info):
        moment = _rtf_time(raw)
        if moment:
            declared.setdefault(key.decode(), moment)
    return from_keys(
        declared,
        {
            "title": ("title",),
            "authors": ("author",),
            "created": ("creatim",),
            "modified": ("revtim",),
        },
    )


# --- Reading -----------------------------------------------------------------------------------

RTF_MAGIC = b"{\\rtf"


def read_rtf(data: bytes) -> list[Block]:
    """The blocks of an .rtf file; LoadError with its reason when unreadable."""
    if not data.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(RTF_MAGIC):
        raise LoadError(Reason.DAMAGED_FILE, "no {\\rtf header: not an RTF file")
    return elements_to_blocks(pandoc_elements("rtf", data))


# What read_rtf raises, and the modules besides this one and tasks/parse/pandoc.py whose
# code decides the output.
REASONS = (Reason.DAMAGED_FILE,)
CODE = ("tasks.parse.elements", "tasks.parse.metadata")
register_pandoc_format(FORMAT, read_rtf, rtf_metadata, REASONS, CODE)
