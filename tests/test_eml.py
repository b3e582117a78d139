"""Email messages (.eml) through the standard library's email parser: the subject as title,
the bodies as text (one copy of a multipart/alternative), attachments of supported formats as
sections of the email, broken files, discovery and `--type eml`."""

from __future__ import annotations

from email.message import EmailMessage

from tasks.core.reasons import Reason, Status
from tasks.ingest.discover import discover
from tasks.parse.formats import TYPES
from tasks.parse.registry import reader_for

from .document_files import load_named, make_eml, make_odt, make_pdf, type_filter_hits

NOTES = b"# Grazing\n\nThe herd grazes the upper meadow.\n\n## Water\n\nThe trough is full.\n"
PDF_LINE = "Vaccination schedule for the herd"


def test_subject_headers_bodies_and_attachments_are_the_text(tmp_path):
    attachments = {
        "notes.md": NOTES,
        "schedule.pdf": make_pdf(PDF_LINE),
        "photo.png": b"\x89PNG\r\n\x1a\n" + bytes(64),  # not a format doc-indexer reads
    }
    (tmp_path / "report.eml").write_bytes(make_eml(attachments))
    doc = load_named(tmp_path, "report.eml")
    assert doc.status == Status.INDEXED, doc.error
    assert doc.title == "Herd report for June"
    assert doc.message == ""
    headers = doc.blocks[0]
    assert headers.section == ""
    assert headers.text.splitlines() == [
        "Subject: Herd report for June",
        "From: Aino Virtanen <aino@example.org>",
        "To: herders@example.org",
        "Date: Mon, 01 Jun 2026 09:30:00 +0300",
    ]
    places = [(block.section, block.heading_level, block.text) for block in doc.blocks[1:]]
    assert places == [
        # The HTML alternative, read as HTML files are: headings, no style or script.
        ("Pass crossing", 1, "Pass crossing"),
        ("Pass crossing", 1, "The llamas crossed the pass safely."),
        ("Pass crossing > Weather", 2, "Weather"),
        ("Pass crossing > Weather", 2, "Snow is expected on Friday."),
        # Attachments: sections named after them, their own headings below.
        ("notes.md > Grazing", 2, "Grazing"),
        ("notes.md > Grazing", 2, "The herd grazes the upper meadow."),
        ("notes.md > Grazing > Water", 3, "Water"),
        ("notes.md > Grazing > Water", 3, "The trough is full."),
        ("schedule.pdf", 1, PDF_LINE),
    ]
    assert doc.blocks[-1].page_number == 1


def test_inline_text_and_html_parts_are_both_read(tmp_path):
    (tmp_path / "mixed.eml").write_bytes(make_eml(alternative=False))
    doc = load_named(tmp_path, "mixed.eml")
    texts = [block.text for block in doc.blocks]
    assert texts[1:] == [
        "Hello herders,",
        "The llamas crossed the pass safely.",
        "Pass crossing",
        "The llamas crossed the pass safely.",
        "Weather",
        "Snow is expected on Friday.",
    ]


def test_attached_messages_and_odt_files_are_read_too(tmp_path):
    inner = EmailMessage()
    inner["Subject"] = "Original: feed order"
    inner.set_content("Order twelve bales of hay.\n")
    outer = EmailMessage()
    outer["Subject"] = "Fwd: feed order"
    outer.set_content("See below.\n")
    outer.add_attachment(inner)  # message/rfc822
    outer.add_attachment(
        make_odt("# Budget\n\nHay costs rose.\n"),
        maintype="application",
        subtype="vnd.oasis.opendocument.text",
        filename="budget.odt",
    )
    (tmp_path / "fwd.eml").write_bytes(bytes(outer))
    doc = load_named(tmp_path, "fwd.eml")
    assert doc.status == Status.INDEXED, doc.error
    places = {block.text: block.section for block in doc.blocks}
    assert places["See below."] == ""
    assert places["Order twelve bales of hay."] == "Original: feed order.eml"
    assert places["Subject: Original: feed order"] == "Original: feed order.eml"
    assert places["Hay costs rose."] == "budget.odt > Budget"


def test_an_unreadable_attachment_leaves_the_email_indexed_and_says_so(tmp_path):
    attachments = {"broken.pdf": b"%PDF-1.4 truncated", "notes.md": NOTES}
    (tmp_path / "mail.eml").write_bytes(make_eml(attachments))
    doc = load_named(tmp_path, "mail.eml")
    assert doc.status == Status.INDEXED
    assert doc.message.startswith("attachment broken.pdf: damaged_pdf: ")
    assert any(block.section.startswith("notes.md") for block in doc.blocks)


def test_a_japanese_email_in_iso_2022_jp_is_text_not_binary(tmp_path):
    message = EmailMessage()
    message["Subject"] = "会議の議事録"
    lines = [f"{n}. 予算 {n} 円" for n in range(1, 60)]  # an escape sequence every few bytes
    message.set_content("\n".join(lines) + "\n", charset="iso-2022-jp", cte="7bit")
    data = bytes(message)
    assert data.count(b"\x1b") > 0.1 * len(data)
    (tmp_path / "jp.eml").write_bytes(data)
    doc = load_named(tmp_path, "jp.eml")
    assert doc.status == Status.INDEXED, doc.error
    assert doc.title == "会議の議事録"
    text = "\n".join(block.text for block in doc.blocks[1:])
    assert text.split() == " ".join(lines).split()


def test_broken_emails_fail_with_their_reasons(tmp_path):
    cases = {
        "words.eml": (b"just some words\nand no header fields at all\n", Reason.DAMAGED_FILE),
        "binary.eml": (bytes(range(256)) * 8, Reason.NOT_A_TEXT_DOCUMENT),
    }
    for name, (data, _) in cases.items():
        (tmp_path / name).write_bytes(data)
    reader = reader_for(TYPES["eml"])
    assert reader is not None
    for name, (_, reason) in cases.items():
        doc = load_named(tmp_path, name)
        assert (doc.status, doc.reason) == (Status.FAILED, reason), (name, doc.error)
        assert reason in reader.reasons


def test_emails_are_discovered_and_filtered_by_type(tmp_path):
    email = make_eml({"notes.md": NOTES})
    (tmp_path / "report.eml").write_bytes(email)
    assert [(s.doc_id, s.mime_type) for s in discover(tmp_path).files] == [
        ("report.eml", "message/rfc822")
    ]
    files = {"report.eml": email, "notes.md": NOTES}
    assert type_filter_hits(tmp_path, files, "eml") == {"report.eml"}
    assert type_filter_hits(tmp_path / "md", files, "md") == {"notes.md"}
