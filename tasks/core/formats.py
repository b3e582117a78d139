"""The document formats doc-indexer reads: file suffix → MIME type, and the `--type` names."""

from __future__ import annotations

MIME_TYPES = {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".html": "text/html",
    ".htm": "text/html",
    ".pdf": "application/pdf",
    ".txt": "text/plain",
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
}

# `--type` values: the suffixes without their dot (md → text/markdown).
TYPES = {suffix.lstrip("."): mime for suffix, mime in MIME_TYPES.items()}

# Office Open XML files, read by tasks/ingest/office.py: MIME type → the `--type` name.
OFFICE_KINDS = {mime: name for name, mime in TYPES.items() if name in ("docx", "pptx", "xlsx")}
