"""The document formats doc-indexer reads: the plain facts, one line per format.

A format's name, MIME type and file suffixes are declared here once, because code of every
layer needs them: discovery (suffix → MIME type), the ledger and the chunk rows (MIME type),
and search's `--type` filter (type name → MIME type), which may not import tasks.parse. How a
format is read (its reader, the reasons it can fail with, its warm-up, the code that decides
its output) is registered by a module of tasks/parse/readers/ under the same name; the
registry (tasks/parse/registry.py) checks that every format here has exactly one reader.
Adding a format: one line below and one reader module.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Format:
    """A document format: its `--type` name, MIME type and file suffixes (lower case, dot)."""

    name: str
    mime: str
    suffixes: tuple[str, ...]


_OOXML = "application/vnd.openxmlformats-officedocument."

FORMATS = (
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

# Suffix → MIME type: what discovery picks up.
MIME_TYPES = {suffix: f.mime for f in FORMATS for suffix in f.suffixes}

# `--type` values: the suffixes without their dot (md and markdown → text/markdown).
TYPES = {suffix.lstrip("."): mime for suffix, mime in MIME_TYPES.items()}

# MIME type → the format.
BY_MIME = {f.mime: f for f in FORMATS}
