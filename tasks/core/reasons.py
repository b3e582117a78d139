"""Every outcome a document can have in the ledger, and every reason it was not indexed.

The ledger's `status` column holds a `Status`, its `reason` column a `Reason` (the README's
table of reasons is checked against this list by tests/test_contracts.py). A reason decides
the status: a file that is readable but holds no text is `empty`; anything else that stops a
file from being indexed is `failed`, and failed files are tried again by later runs (while a
file's bytes do not change, with a back-off: tasks/ingest/discover.py, RETRY_BACKOFF).
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """Where a document stands after a run."""

    INDEXED = "indexed"
    EMPTY = "empty"
    FAILED = "failed"


class Reason(StrEnum):
    """Why a document is empty or failed; each member knows its status and its meaning."""

    status: Status
    meaning: str

    def __new__(cls, code: str, status: Status, meaning: str) -> Reason:
        member = str.__new__(cls, code)
        member._value_ = code
        member.status = status
        member.meaning = meaning
        return member

    @classmethod
    def of(cls, code: str) -> Reason:
        """The reason stored as `code` (the ledger's reason column)."""
        return next(reason for reason in cls if reason.value == code)

    EMPTY_FILE = ("empty_file", Status.EMPTY, "the file has no bytes")
    NO_TEXT = ("no_text", Status.EMPTY, "the file is readable but holds no text")
    NO_TEXT_LAYER = (
        "no_text_layer",
        Status.EMPTY,
        "a PDF whose pages are images without a text layer (scanned) and OCR read no text",
    )
    OCR_OFF = (
        "ocr_off",
        Status.EMPTY,
        "a PDF whose pages are images without a text layer, not read because of --ocr off",
    )
    ENCRYPTED = (
        "encrypted",
        Status.FAILED,
        "the file needs a password (a PDF's empty one was tried) or is DRM-protected (an e-book)",
    )
    DAMAGED_PDF = ("damaged_pdf", Status.FAILED, "a PDF too broken to read, even after repair")
    NOT_A_PDF = ("not_a_pdf", Status.FAILED, "a file with a .pdf name but no PDF header")
    NOT_A_TEXT_DOCUMENT = (
        "not_a_text_document",
        Status.FAILED,
        "a file with a text name whose bytes are binary, or fit no text encoding",
    )
    DAMAGED_OFFICE_FILE = (
        "damaged_office_file",
        Status.FAILED,
        "a .docx, .pptx or .xlsx file that is not a readable Office archive",
    )
    LEGACY_OFFICE_FORMAT = (
        "legacy_office_format",
        Status.FAILED,
        "a .docx, .pptx or .xlsx name on a legacy binary Office file (.doc, .ppt, .xls)",
    )
    DAMAGED_FILE = (
        "damaged_file",
        Status.FAILED,
        "an .odt, .epub, .rtf or .eml file that is not a readable file of its format",
    )
    TOO_LARGE = (
        "too_large",
        Status.FAILED,
        "the file is over the --max-file-mb limit, or an Office, OpenDocument or EPUB file "
        "unpacks to over 1 GiB",
    )
    PARSE_TIMEOUT = (
        "parse_timeout",
        Status.FAILED,
        "parsing took longer than --parse-timeout seconds",
    )
    PARSE_CRASH = ("parse_crash", Status.FAILED, "the parser process died on the file")
    PARSE_ERROR = ("parse_error", Status.FAILED, "the parser raised an error on the file")
    UNREADABLE = ("unreadable", Status.FAILED, "the file could not be read (permissions, I/O)")
    VANISHED = ("vanished", Status.FAILED, "the file was deleted after the run found it")
    BATCH_FAILED = (
        "batch_failed",
        Status.FAILED,
        "a step of the file's batch still failed after its retries",
    )
