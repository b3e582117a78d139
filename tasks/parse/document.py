"""Parse one file into a document, fully offline, by the reader registered for its format.

The readers (tasks/parse/readers/, registered in tasks/parse/registry.py) turn a file's bytes
into blocks: Markdown, HTML and text through unstructured as text, PDFs by their text layer and
OCR, Office, OpenDocument, EPUB and RTF files through unstructured's partitioners, emails with
the standard library's parser (their attachments as sections). Headings become a section path
that every following block carries until a heading of the same or a higher level. A file that
cannot be parsed becomes a document with its reason, never an exception.

A document's metadata is what its reader found in the file (tasks/parse/readers/), with the
language detected in its text where the file declares none. Its title is the one the file
gives (an email's subject, a declared title), else its first heading, else its file name.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tasks.core.reasons import Reason
from tasks.core.records import Document, SourceFile, document_text, sha256_hex
from tasks.parse import metadata
from tasks.parse.errors import LoadError
from tasks.parse.registry import Reading, ReadOptions, reader_for, warm_up_reader, warm_up_readers
from tasks.parse.unstructured_offline import install_unstructured_nlp, sentence_pipeline

__all__ = ["ReadOptions", "load_document", "read_blocks", "warm_up"]


def read_blocks(source: SourceFile, data: bytes, options: ReadOptions) -> Reading:
    """What the reader of the file's MIME type makes of its bytes."""
    install_unstructured_nlp()
    reader = reader_for(source.mime_type)
    if reader is None:
        raise ValueError(f"no reader for MIME type {source.mime_type!r}")
    warm_up_reader(reader)  # on this process's first file of the format, unless warm already
    return reader.read(source, data, options)


# The formats whose readers a parser process warms up as it starts: the ones most folders
# hold. The others (PDF: about 2 s of imports; Office) warm up on their first file.
STARTUP_FORMATS = ("md", "html", "txt")


def warm_up() -> None:
    """Import the text readers' parsers and build the sentence splitter now, not on the first
    file (see STARTUP_FORMATS).

    The OCR engine is built on the first page that needs it: most runs have none."""
    install_unstructured_nlp()
    sentence_pipeline()
    warm_up_readers(STARTUP_FORMATS)
    metadata.warm_up()


def load_document(source: SourceFile, options: ReadOptions | None = None) -> Document:
    """Read and partition one file; one that cannot be loaded becomes an empty or failed
    document with its reason."""
    options = options or ReadOptions()
    try:
        data = Path(source.path).read_bytes()
    except FileNotFoundError:
        return Document.not_indexed(source, Reason.VANISHED, "deleted after discovery")
    except OSError as exc:
        return Document.not_indexed(source, Reason.UNREADABLE, str(exc))
    if not data:
        return Document.not_indexed(source, Reason.EMPTY_FILE, "the file has no bytes")
    digest = sha256_hex(data)
    if digest != source.content_hash:  # changed since discovery: index what we read
        source = replace(source, size=len(data), content_hash=digest)
    try:
        reading = read_blocks(source, data, options)
    except LoadError as exc:
        return Document.not_indexed(source, exc.reason, exc.message)
    except Exception as exc:  # noqa: BLE001 - any parser failure is this file's failure
        return Document.not_indexed(source, Reason.PARSE_ERROR, f"{type(exc).__name__}: {exc}")
    blocks = reading.blocks
    if not blocks:
        return Document.not_indexed(source, Reason.NO_TEXT, "no text found in the file")
    first_heading = next((b.section.split(" > ")[-1] for b in blocks if b.section), None)
    found = metadata.with_language(reading.metadata, document_text(blocks))
    return Document(
        source,
        reading.title or found.title or first_heading or source.title,
        tuple(blocks),
        message="; ".join(reading.notes),
        ocr_pages=reading.ocr_pages,
        ocr_seconds=round(reading.ocr_seconds, 3),
        metadata=found,
    )
