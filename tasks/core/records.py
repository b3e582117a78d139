"""The records that move through the pipeline: source file → document → chunk.

Plain frozen dataclasses: picklable for Prefect result storage, cheap to compare in tests.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from tasks.core.reasons import Reason, Status


def sha256_hex(data: bytes | str) -> str:
    """Hex sha256 of bytes, or of a string's UTF-8 encoding."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class SourceFile:
    """A file found under the source root, identified by its path and its bytes."""

    doc_id: str  # path relative to the source root, posix separators
    path: str  # absolute path on disk
    size: int
    mtime_us: int  # modification time, microseconds since the epoch (exact in the ledger)
    content_hash: str  # sha256 of the file bytes
    mime_type: str
    # An object's ETag as its store listed it ("" for a file, or a store that gives none):
    # it changes with every write, even one within the second of the last-modified time.
    etag: str = ""

    @property
    def title(self) -> str:
        """The title of a document that has no heading: its file name without the suffix."""
        return PurePosixPath(self.doc_id).stem


@dataclass(frozen=True)
class LedgerEntry:
    """What the documents table says about one document, as far as planning a run needs."""

    content_hash: str
    status: Status
    pipeline_fingerprint: str
    size: int = -1
    mtime_us: int = -1
    reason: Reason | None = None
    etag: str = ""  # the object's ETag when a run last read it ("" for a file, or not recorded)
    attempts: int = 0  # failed attempts in a row (0 once indexed or empty)
    recorded_us: int = -1  # when the last run that tried the file recorded it (µs since the epoch)


@dataclass(frozen=True)
class Block:
    """One partitioned element of a document with the place it came from."""

    text: str
    section: str = ""  # heading path "A > B > C"; "" before the first heading
    heading_level: int = 0  # level of the innermost heading in `section`; 0 when none
    page_number: int | None = None  # 1-based: PDF pages, slides
    ocr: bool = False  # read from the page's image by OCR (the page has no text layer)


@dataclass(frozen=True)
class Metadata:
    """What a document says about itself (each reader of tasks/parse/readers/ reads its format's).

    `title`, `authors`, `created` and `modified` are the document's own statements,
    normalised: dates in ISO 8601 where they parse (else as written). `language` is a
    lower-case tag ("en", "pt-br"): the one the document declares, else the one detected in
    its text, else None. `meta` is every key the document declares, by its own names (a
    Markdown file's YAML front matter, an HTML page's <meta> names, a PDF's information
    dictionary, ...), as the JSON text of an object; "" when it declares none.
    """

    title: str | None = None
    authors: tuple[str, ...] = ()
    created: str | None = None
    modified: str | None = None
    language: str | None = None
    meta: str = ""


@dataclass(frozen=True)
class Document:
    """A loaded source file: its blocks of text, or the reason it has none."""

    source: SourceFile
    title: str
    blocks: tuple[Block, ...] = ()
    status: Status = Status.INDEXED
    reason: Reason | None = None  # set when status is empty or failed
    message: str = ""  # the detail of `reason`
    ocr_pages: tuple[int, ...] = ()  # pages whose text came from OCR
    ocr_seconds: float = 0.0  # time spent rendering and recognising pages for OCR
    metadata: Metadata = field(default_factory=Metadata)  # what the document says about itself

    @property
    def doc_id(self) -> str:
        return self.source.doc_id

    @classmethod
    def not_indexed(cls, source: SourceFile, reason: Reason, message: str) -> Document:
        """A file that ends empty or failed (the reason decides which), with no blocks."""
        return cls(source, source.title, status=reason.status, reason=reason, message=message)

    @property
    def error(self) -> str:
        """ "reason: message" for people (logs, the command line); "" when indexed."""
        return f"{self.reason}: {self.message}" if self.reason else ""


@dataclass(frozen=True)
class Chunk:
    """A piece of a document's text that is embedded and stored as one row."""

    chunk_id: str
    doc_id: str
    chunk_index: int
    chunk_count: int
    text: str
    char_start: int  # offsets into the document text (blocks joined by BLOCK_SEPARATOR)
    char_end: int
    section: str
    heading_level: int
    page_number: int | None
    ocr: bool = False  # the text was read by OCR
    text_hash: str = field(default="")  # sha256 of the text, or of the model's input (reuse.py)

    def __post_init__(self) -> None:
        if not self.text_hash:
            object.__setattr__(self, "text_hash", sha256_hex(self.text))


# Blocks are joined with a blank line to form the document text that chunk offsets index.
BLOCK_SEPARATOR = "\n\n"


def document_text(blocks: tuple[Block, ...] | list[Block]) -> str:
    """The document text that chunk offsets refer to."""
    return BLOCK_SEPARATOR.join(block.text for block in blocks)


CHUNK_MARK = ":chunk:"  # between a chunk id's doc_id and its number


def chunk_id(doc_id: str, index: int, count: int) -> str:
    """Deterministic chunk id, zero-padded to 4 digits or wider when the document needs it."""
    width = max(4, len(str(max(count - 1, 0))))
    return f"{doc_id}{CHUNK_MARK}{index:0{width}d}"


def doc_id_of(chunk_id: str) -> str:
    """The document a `chunk_id` belongs to."""
    return chunk_id.rpartition(CHUNK_MARK)[0]
