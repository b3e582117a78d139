"""Word, PowerPoint and Excel files (.docx, .pptx, .xlsx) through unstructured's partitioners.

What unstructured 0.27 returns, and what becomes of it here:

- .docx: heading styles are Title elements with `category_depth` = level - 1 (the "Title"
  style is depth 0, like "Heading 1"): they make the heading path, as in Markdown. Body
  paragraphs, list items and tables follow; section headers and footers are skipped (they
  repeat on every page). A .docx has no pages until it is rendered, so no page number.
- .pptx: elements come slide by slide with `page_number` = the slide number. The slide title
  is a Title of depth 0 and becomes the section of everything on its slide. Body paragraphs
  whose bullets come from the layout are classed by unstructured's text heuristics, and with
  doc-indexer's blank spaCy pipeline short ones come back as Title elements of depth >= 1:
  they are not headings, so only depth-0 Titles are. Speaker notes are read too.
- .xlsx: one Table element per sheet (or per block of cells) with `page_name` = the sheet
  name, which becomes the section.
- Tables (docx, pptx, xlsx) become one block of rows, cells joined by " | ".
- Metadata: the package's core properties (docProps/core.xml; `office_metadata` below).

Failures are told from the bytes before partitioning: a password-protected OOXML file is an
OLE compound file (D0 CF 11 E0 ...) holding EncryptionInfo and EncryptedPackage streams
(`encrypted`); another OLE file is a legacy .doc/.ppt/.xls under a new name
(`legacy_office_format`); anything that is not a ZIP archive with the format's main part and
intact members is `damaged_office_file`. The partitioners' own errors for what slips through
are mapped to the same reasons.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from typing import Any

from tasks.core.reasons import Reason
from tasks.core.records import Block, Metadata, SourceFile
from tasks.parse.archives import check_zip, read_member
from tasks.parse.errors import LoadError
from tasks.parse.metadata import element_values, from_keys, xml_root
from tasks.parse.registry import Format, ReadFunction, Reading, ReadOptions, register

# --- Metadata ----------------------------------------------------------------------------------


def office_metadata(data: bytes) -> Metadata:
    """What the core properties of a .docx, .pptx or .xlsx package say."""
    root = xml_root(read_member(data, "docProps/core.xml"))
    if root is None:
        return Metadata()
    declared = element_values(root)
    return from_keys(
        declared,
        {
            "title": ("title",),
            "authors": ("creator",),
            "created": ("created",),
            "modified": ("modified",),
            "language": ("language",),
        },
    )


# --- Reading -----------------------------------------------------------------------------------

OLE_MAGIC = bytes.fromhex("D0CF11E0A1B11AE1")
# The part each format cannot do without.
MAIN_PART = {
    "docx": "word/document.xml",
    "pptx": "ppt/presentation.xml",
    "xlsx": "xl/workbook.xml",
}

# Element categories that are not document text.
_SKIPPED_CATEGORIES = {"Image", "PageBreak", "Header", "Footer", "PageNumber"}


def _ole_streams(data: bytes) -> set[str]:
    import olefile

    try:
        with olefile.OleFileIO(io.BytesIO(data)) as ole:
            return {"/".join(entry) for entry in ole.listdir(streams=True, storages=False)}
    except OSError:
        return set()


def check_office_bytes(data: bytes, kind: str) -> None:
    """Raise LoadError with the reason these bytes cannot be a readable .docx/.pptx/.xlsx."""
    if data.startswith(OLE_MAGIC):
        if {"EncryptionInfo", "EncryptedPackage"} <= _ole_streams(data):
            raise LoadError(Reason.ENCRYPTED, f"the .{kind} file is password-protected")
        raise LoadError(
            Reason.LEGACY_OFFICE_FORMAT,
            f"an OLE compound file (a legacy .doc, .ppt or .xls?), not a .{kind}",
        )
    parts = ("[Content_Types].xml", MAIN_PART[kind])
    check_zip(data, f".{kind}", parts, Reason.DAMAGED_OFFICE_FILE)


def partition_office(data: bytes, kind: str) -> list[Any]:
    """unstructured elements of a .docx, .pptx or .xlsx file; LoadError with its reason."""
    from lxml import etree
    from unstructured.errors import UnprocessableEntityError

    check_office_bytes(data, kind)
    file = io.BytesIO(data)
    try:
        if kind == "docx":
            from unstructured.partition.docx import partition_docx

            return partition_docx(file=file, languages=[""])
        if kind == "pptx":
            from unstructured.partition.pptx import partition_pptx

            return partition_pptx(file=file, languages=[""], include_slide_notes=True)
        if kind == "xlsx":
            from unstructured.partition.xlsx import partition_xlsx

            return partition_xlsx(file=file, languages=[""])
    except UnprocessableEntityError as exc:
        reason = Reason.ENCRYPTED if "password" in str(exc).lower() else Reason.DAMAGED_OFFICE_FILE
        raise LoadError(reason, str(exc)) from None
    except (
        KeyError,
        ValueError,
        zipfile.BadZipFile,
        zlib.error,
        EOFError,
        etree.XMLSyntaxError,
        SyntaxError,  # xml.etree's ParseError
    ) as exc:
        raise LoadError(Reason.DAMAGED_OFFICE_FILE, f"{type(exc).__name__}: {exc}") from None
    raise ValueError(f"not an Office format: {kind}")


def table_rows_text(element: Any) -> str:
    """A Table element as lines of cells joined by " | " (from its HTML, when it has one)."""
    import lxml.etree
    import lxml.html

    html = element.metadata.text_as_html
    if not html:
        return str(element.text or "")
    try:
        table = lxml.html.fragment_fromstring(html, create_parent="div")
    except (ValueError, lxml.etree.ParserError):
        return str(element.text or "")
    lines = []
    for row in table.iter("tr"):
        cells = [" ".join(cell.text_content().split()) for cell in row if cell.tag in ("td", "th")]
        if any(cells):
            lines.append(" | ".join(cells))
    return "\n".join(lines) or str(element.text or "")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def office_blocks(elements: list[Any], kind: str) -> list[Block]:
    """Blocks with heading path (docx), slide title and number (pptx) or sheet name (xlsx)."""
    blocks: list[Block] = []
    headings: list[tuple[int, str]] = []  # docx: (level, text), outermost first
    slide_titles: dict[int | None, str] = {}  # pptx: notes come before the title on a slide
    if kind == "pptx":
        for element in elements:
            if element.category == "Title" and element.metadata.category_depth == 0:
                slide_titles.setdefault(element.metadata.page_number, _one_line(element.text))
    for element in elements:
        text = (element.text or "").strip()
        if not text or element.category in _SKIPPED_CATEGORIES:
            continue
        meta = element.metadata
        if element.category == "Table":
            text = table_rows_text(element)
        if kind == "docx":
            if element.category == "Title" and meta.category_depth is not None:
                level = meta.category_depth + 1
                headings = [h for h in headings if h[0] < level] + [(level, _one_line(text))]
            section = " > ".join(h[1] for h in headings)
            blocks.append(Block(text, section, headings[-1][0] if headings else 0))
        elif kind == "pptx":
            title = slide_titles.get(meta.page_number, "")
            blocks.append(Block(text, title, 1 if title else 0, meta.page_number))
        elif kind == "xlsx":
            sheet = meta.page_name or ""
            blocks.append(Block(text, sheet, 1 if sheet else 0))
        else:
            raise ValueError(f"not an Office format: {kind}")
    return blocks


def load_office(data: bytes, kind: str) -> list[Block]:
    """The blocks of a .docx, .pptx or .xlsx file; LoadError with its reason when unreadable."""
    return office_blocks(partition_office(data, kind), kind)


def _reader(kind: str) -> ReadFunction:
    def read(source: SourceFile, data: bytes, options: ReadOptions) -> Reading:
        blocks = load_office(data, kind)  # checks the package first
        return Reading(blocks, metadata=office_metadata(data))

    return read


def warm_up() -> None:
    import unstructured.partition.docx  # noqa: F401
    import unstructured.partition.pptx  # noqa: F401
    import unstructured.partition.xlsx  # noqa: F401


REASONS = (
    Reason.ENCRYPTED,
    Reason.LEGACY_OFFICE_FORMAT,
    Reason.DAMAGED_OFFICE_FILE,
    Reason.TOO_LARGE,
)
CODE = ("tasks.parse.archives", "tasks.parse.metadata")
_OOXML = "application/vnd.openxmlformats-officedocument."
FORMATS = {
    "docx": Format("docx", _OOXML + "wordprocessingml.document", (".docx",)),
    "pptx": Format("pptx", _OOXML + "presentationml.presentation", (".pptx",)),
    "xlsx": Format("xlsx", _OOXML + "spreadsheetml.sheet", (".xlsx",)),
}
for _kind in MAIN_PART:
    register(FORMATS[_kind], _reader(_kind), REASONS, warm_up=warm_up, code=CODE)
