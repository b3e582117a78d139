"""The document formats doc-indexer reads: file suffix → MIME type, and the `--type` names."""

from __future__ import annotations

MIME_TYPES = {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".html": "text/html",
    ".htm": "text/html",
    ".pdf": "application/pdf",
    ".txt": "text/plain",
}

# `--type` values: the suffixes without their dot (md → text/markdown).
TYPES = {suffix.lstrip("."): mime for suffix, mime in MIME_TYPES.items()}
