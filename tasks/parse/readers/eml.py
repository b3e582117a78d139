"""Email messages (.eml, RFC 5322 / MIME) through the standard library's `email` parser.

- The Subject is the document's title; From, Date and Content-Language its authors, date
  and language (`email_metadata` below). The first block holds the headers people search by
  (Subject, From, To, Cc, Date), one per line.
- Body parts (text/plain and text/html that are not attachments) are the text, in message
  order; HTML goes through the HTML reading path (page chrome dropped, headings make the
  heading path). Of a multipart/alternative, the richest version that yields text is read
  (the last one first, as RFC 2046 orders them), so the text/plain and text/html copies of
  one body are not both indexed. A part without a charset is decoded as text files are.
- Attachments (and inline parts that are not body text) of a supported format, told by the
  file name's suffix or else the MIME type, are read by that format's reader (an attached
  message by this one) and become sections of the email: each block's section is the
  attachment's name, then its own heading path ("report.pdf > Results"). Attachments of other
  formats are skipped. An attachment that cannot be read leaves the email indexed, and the
  ledger's error column names it with its reason.

Attachments are sections, not documents of their own: the pipeline and the documents ledger
keep one document per file, so a changed or deleted .eml replaces or removes its attachments'
chunks with its own, in the same commit.

A file whose bytes are binary is `not_a_text_document`; one with no header fields (the parser
takes anything for a message) is `damaged_file`.
"""

from __future__ import annotations

import email
import email.policy
import email.utils
import time
from dataclasses import dataclass, field, replace
from email.message import EmailMessage, Message, MIMEPart
from pathlib import PurePosixPath

from tasks.core.reasons import Reason
from tasks.core.records import Block, Metadata, SourceFile
from tasks.parse.decode import decode_bytes, looks_binary
from tasks.parse.elements import text_blocks
from tasks.parse.errors import LoadError
from tasks.parse.metadata import date_text, language_tag, meta_json, one_line
from tasks.parse.readers.pdf import PdfOptions
from tasks.parse.registry import (
    Format,
    Reader,
    Reading,
    ReadOptions,
    reader_for,
    reader_for_name,
    register,
)

# --- Metadata ----------------------------------------------------------------------------------


# The email headers that are metadata.
EMAIL_HEADERS = ("Subject", "From", "To", "Cc", "Date", "Content-Language")


def email_metadata(message: Message) -> Metadata:
    """What an email's headers say: Subject, From (each sender "Name <address>"), Date,
    Content-Language; To and Cc in `meta`."""
    declared = {name: text for name in EMAIL_HEADERS if (text := one_line(message.get(name, "")))}
    senders = email.utils.getaddresses([str(v) for v in message.get_all("From", [])])
    authors = tuple(
        dict.fromkeys(
            email.utils.formataddr((name, address)) if address else name
            for name, address in senders
            if name or address
        )
    )
    return Metadata(
        title=declared.get("Subject"),
        authors=authors,
        created=date_text(declared.get("Date")),
        language=language_tag(declared.get("Content-Language")),
        meta=meta_json(declared),
    )


# --- Reading -----------------------------------------------------------------------------------

# The headers of the first block, in this order.
SEARCHED_HEADERS = ("Subject", "From", "To", "Cc", "Date")
BODY_TYPES = {"text/plain": "txt", "text/html": "html"}
MESSAGE_TYPE = "message/rfc822"


@dataclass
class _Read:
    """What reading one message gathers as it walks its parts."""

    source: SourceFile
    options: ReadOptions
    started: float
    blocks: list[Block] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ocr_seconds: float = 0.0
    attachments: int = 0  # attachments met so far, to name those that have no name

    def remaining_options(self) -> ReadOptions:
        """The options for an attachment: a PDF gets what is left of the file's OCR time
        budget."""
        pdf = self.options.of("pdf", PdfOptions)
        if not pdf.ocr_budget:
            return self.options
        left = pdf.ocr_budget - (time.monotonic() - self.started)
        return self.options.with_format("pdf", replace(pdf, ocr_budget=max(left, 1e-3)))


def parse_message(data: bytes) -> EmailMessage:
    """The message in `data`; LoadError when it is binary or has no header fields."""
    sample = data[:4096]
    # ESC is text in ISO-2022-JP mail (7-bit Japanese), NUL never is.
    if b"\x00" in sample or looks_binary(sample.replace(b"\x1b", b"").decode("latin-1")):
        raise LoadError(Reason.NOT_A_TEXT_DOCUMENT, "file content is binary, not an email")
    message = email.message_from_bytes(data, policy=email.policy.default)
    assert isinstance(message, EmailMessage)  # what policy.default makes
    if not message.keys():
        raise LoadError(Reason.DAMAGED_FILE, "no mail header fields: not an email message")
    return message


def _one_line(value: object) -> str:
    return " ".join(str(value).split())


def header_text(message: Message) -> str:
    """The searched headers present in the message, one "Name: value" line each."""
    lines = []
    for name in SEARCHED_HEADERS:
        value = _one_line(message.get(name, ""))
        if value:
            lines.append(f"{name}: {value}")
    return "\n".join(lines)


def _body_text(part: MIMEPart) -> str:
    payload = part.get_payload(decode=True)
    if not isinstance(payload, bytes):
        return ""
    charset = part.get_content_charset()
    if charset:
        try:
            return payload.decode(charset, errors="replace")
        except LookupError:
            pass  # an unknown charset: guessed like a text file's
    return decode_bytes(payload).text


def attachment_name(part: MIMEPart, index: int) -> str:
    """The attachment's file name without any folder, or a name made up from its place."""
    name = PurePosixPath((part.get_filename() or "").replace("\\", "/")).name.strip()
    if name:
        return name
    if part.get_content_type() == MESSAGE_TYPE:
        inner = _attached_message(part)
        subject = _one_line(inner.get("subject", "")) if inner is not None else ""
        return f"{subject or 'message'}.eml".replace("/", "-")
    return f"attachment-{index}"


def _attached_message(part: MIMEPart) -> Message | None:
    """The message a message/rfc822 part holds (None when the parser left it unparsed)."""
    payload = part.get_payload()
    if isinstance(payload, list) and payload and isinstance(payload[0], Message):
        return payload[0]
    return None


def _attachment_reader(part: MIMEPart, name: str) -> Reader | None:
    return reader_for_name(name) or reader_for(part.get_content_type())


def _attachment_bytes(part: MIMEPart) -> bytes:
    inner = _attached_message(part) if part.get_content_type() == MESSAGE_TYPE else None
    if inner is not None:
        return inner.as_bytes(policy=email.policy.default)
    payload = part.get_payload(decode=True)
    return payload if isinstance(payload, bytes) else b""


def _read_attachment(part: MIMEPart, state: _Read) -> None:
    state.attachments += 1
    name = attachment_name(part, state.attachments)
    reader = _attachment_reader(part, name)
    if reader is None:
        return  # a format doc-indexer does not read
    data = _attachment_bytes(part)
    if not data:
        state.notes.append(f"attachment {name}: empty_file: the attachment has no bytes")
        return
    source = replace(
        state.source,
        doc_id=f"{state.source.doc_id}/{name}",
        size=len(data),
        mime_type=reader.format.mime,
    )
    try:
        reading = reader.read(source, data, state.remaining_options())
    except LoadError as exc:
        state.notes.append(f"attachment {name}: {exc.reason}: {exc.message}")
        return
    except Exception as exc:  # noqa: BLE001 - the attachment's failure, not the email's
        reason = Reason.PARSE_ERROR
        state.notes.append(f"attachment {name}: {reason}: {type(exc).__name__}: {exc}")
        return
    if not reading.blocks:
        state.notes.append(f"attachment {name}: no_text: no text found in the attachment")
    for block in reading.blocks:
        section = f"{name} > {block.section}" if block.section else name
        state.blocks.append(replace(block, section=section, heading_level=block.heading_level + 1))
    state.notes += [f"attachment {name}: {note}" for note in reading.notes]  # OCR's, too
    state.ocr_seconds += reading.ocr_seconds


def _read_part(part: MIMEPart, state: _Read) -> None:
    """Add the blocks of one MIME entity (recursively) to `state`."""
    kind = part.get_content_type()
    if kind == MESSAGE_TYPE:
        _read_attachment(part, state)
    elif kind == "multipart/alternative":
        for alternative in reversed(list(part.iter_parts())):
            trial = replace(state, blocks=[], notes=[])
            _read_part(alternative, trial)
            if trial.blocks:
                state.blocks += trial.blocks
                state.notes += trial.notes
                state.ocr_seconds, state.attachments = trial.ocr_seconds, trial.attachments
                return
    elif part.is_multipart():
        for sub in part.iter_parts():
            _read_part(sub, state)
    elif kind in BODY_TYPES and not part.is_attachment():
        text = _body_text(part)
        if text.strip():
            state.blocks += text_blocks(text, "html" if BODY_TYPES[kind] == "html" else "txt")
    else:
        _read_attachment(part, state)


def read_eml(source: SourceFile, data: bytes, options: ReadOptions) -> Reading:
    """The blocks of an email: its headers, body and readable attachments; its subject."""
    message = parse_message(data)
    state = _Read(source, options, time.monotonic())
    headers = header_text(message)
    if headers:
        state.blocks.append(Block(headers))
    _read_part(message, state)
    subject = _one_line(message.get("subject", ""))
    return Reading(
        state.blocks,
        title=subject or None,
        notes=tuple(state.notes),
        metadata=email_metadata(message),
        ocr_seconds=state.ocr_seconds,  # the attachments' (their pages are not the email's)
    )


register(
    Format("eml", "message/rfc822", (".eml",)),
    read_eml,
    (Reason.NOT_A_TEXT_DOCUMENT, Reason.DAMAGED_FILE),
    code=("tasks.parse.decode", "tasks.parse.elements", "tasks.parse.metadata"),
)
