"""The document formats doc-indexer reads: the plain facts, one line per format.

A format's name, MIME type and file suffixes are declared here once, because code of every
layer needs them: discovery (suffix → MIME type), the ledger and the chunk rows (MIME type),
and search's `--type` filter (type name → MIME type), which may not import tasks.parse. How a
format is read (its reader, the reasons it can fail with, its warm-up, the code that decides
its output) is registered by a module of tasks/parse/readers/ under the same name; the
registry (tasks/parse/registry.py) checks that every format here has exactly one reader.
Adding a format: one line below and one reader module.

Another package adds a format without editing this file: an entry point of the group
"doc_indexer.formats" names its `Format` (module:attribute), in a module that imports no
more than this one (discovery and search read it; its reader, under "doc_indexer.readers",
is imported only where files are parsed: tasks/core/plugins.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import entry_points

from tasks.core.plugins import FORMATS_GROUP


@dataclass(frozen=True)
class Format:
    """A document format: its `--type` name, MIME type and file suffixes (lower case, dot)."""

    name: str
    mime: str
    suffixes: tuple[str, ...]


_OOXML = "application/vnd.openxmlformats-officedocument."

BUILT_IN = (
    Format("md", "text/markdown", (".md", ".markdown")),
    Format("html", "text/html", (".html", ".htm")),
    Format("pdf", "application/pdf", (".pdf",)),
    Format("txt", "text/plain", (".txt",)),
    Format("docx", _OOXML + "wordprocessingml.document", (".docx",)),
    Format("pptx", _OOXML + "presentationml.presentation", (".pptx",)),
    Format("xlsx", _OOXML + "spreadsheetml.sheet", (".xlsx",)),
    Format("odt", "application/vnd.oasis.opendocument.text", (".odt",)),
    Format("epub", "application/epub+zip", (".epub",)),
    Format("rtf", "application/rtf", (".rtf",)),
    Format("eml", "message/rfc822", (".eml",)),
)


def installed_formats(known: tuple[Format, ...]) -> tuple[Format, ...]:
    """The formats that installed distributions name under the "doc_indexer.formats" entry
    points; ValueError for one that is no Format or takes a name or suffix of `known`."""
    found: list[Format] = []
    for point in entry_points(group=FORMATS_GROUP):
        declared = point.load()
        if not isinstance(declared, Format):
            raise ValueError(f"entry point {point.value} names no Format")
        taken = {f.name for f in (*known, *found)}
        suffixes = {suffix for f in (*known, *found) for suffix in f.suffixes}
        if declared.name in taken or suffixes & set(declared.suffixes):
            raise ValueError(
                f"entry point {point.value}: format {declared.name!r} takes a name or suffix "
                "another format has"
            )
        found.append(declared)
    return tuple(found)


FORMATS = BUILT_IN + installed_formats(BUILT_IN)

# Suffix → MIME type: what discovery picks up.
MIME_TYPES = {suffix: f.mime for f in FORMATS for suffix in f.suffixes}

# `--type` values: the suffixes without their dot (md and markdown → text/markdown).
TYPES = {suffix.lstrip("."): mime for suffix, mime in MIME_TYPES.items()}

# MIME type → the format.
BY_MIME = {f.mime: f for f in FORMATS}
