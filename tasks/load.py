"""Load source files into documents with unstructured's partitioners, fully offline.

Markdown, HTML and plain text are decoded here (BOMs, BOM-less UTF-16/32, ISO-2022-JP and
legacy code pages via charset-normalizer) and handed to unstructured as text; PDFs go to
`partition_pdf(strategy="fast")`, which reads the text layer. Headings become a section path
that every following block carries until a heading of the same or a higher level.
"""

from __future__ import annotations

import codecs
import io
from dataclasses import replace
from pathlib import Path

import charset_normalizer
from prefect import task

from tasks import offline
from tasks.cache_keys import LOAD_CACHE
from tasks.records import EMPTY, FAILED, INDEXED, Block, Document, SourceFile, sha256_hex

# Element categories that are not document text.
_SKIPPED_CATEGORIES = {"Image", "PageBreak", "Header", "Footer", "PageNumber"}

# HTML that is page chrome, not content (Sphinx's "¶" heading anchors included); removed
# before partitioning.
_HTML_CHROME_XPATH = (
    "//script | //style | //noscript | //template | //nav | //*[@role='navigation']"
    " | //a[contains(concat(' ', @class, ' '), ' headerlink ')]"
)

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


class LoadError(Exception):
    """A file that cannot become a document; `reason` is a short machine-readable code."""

    def __init__(self, reason: str, message: str):
        super().__init__(f"{reason}: {message}")
        self.reason = reason


def _wide_encoding_without_bom(sample: bytes) -> str | None:
    """Guess BOM-less UTF-32/UTF-16 from where the zero bytes of mostly-ASCII text sit."""
    if b"\x00" not in sample:
        return None

    def zero_share(offset: int, step: int) -> float:
        column = sample[offset::step]
        return column.count(0) / len(column) if column else 0.0

    quad = [zero_share(i, 4) for i in range(4)]
    if min(quad[1:]) > 0.9 and quad[0] < 0.1:
        return "utf-32-le"
    if min(quad[:3]) > 0.9 and quad[3] < 0.1:
        return "utf-32-be"
    even, odd = zero_share(0, 2), zero_share(1, 2)
    if odd > 0.3 and even < 0.05:
        return "utf-16-le"
    if even > 0.3 and odd < 0.05:
        return "utf-16-be"
    return None


def decode_text(data: bytes) -> str:
    """Decode a text file's bytes: BOM, BOM-less UTF-16/32, UTF-8, then detection."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data.decode(encoding)
    candidates = [_wide_encoding_without_bom(data[:4096])]
    if b"\x1b$B" in data or b"\x1b$@" in data:
        candidates.append("iso2022_jp")
    candidates.append("utf-8")
    for encoding in filter(None, candidates):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    best = charset_normalizer.from_bytes(data).best()
    if best is None:
        raise LoadError("not_a_text_document", "no text encoding fits the file's bytes")
    return str(best)


def _looks_binary(text: str) -> bool:
    """True when decoded 'text' is mostly control characters: a binary file with a text name."""
    sample = text[:4096]
    if not sample:
        return False
    control = sum(1 for ch in sample if (ord(ch) < 32 and ch not in "\t\n\r\f") or ch == "\ufffd")
    return control / len(sample) > 0.05


def _strip_html_chrome(html: str) -> str:
    """Drop scripts, styles and navigation blocks so only page content is partitioned."""
    import lxml.html

    try:
        tree = lxml.html.document_fromstring(html)
    except (ValueError, lxml.etree.ParserError):
        return html
    for node in tree.xpath(_HTML_CHROME_XPATH):
        node.drop_tree()
    return lxml.html.tostring(tree, encoding="unicode")


def partition(source: SourceFile, data: bytes) -> list:
    """unstructured elements of one file, by MIME type."""
    offline.install_unstructured_nlp()
    if source.mime_type == "application/pdf":
        if not data.startswith(b"%PDF"):
            raise LoadError("not_a_pdf", "file has a .pdf name but no PDF header")
        offline.check_pdf_support()
        from unstructured.partition.pdf import partition_pdf

        return partition_pdf(file=io.BytesIO(data), strategy="fast", languages=["eng"])
    if data.startswith(b"%PDF"):
        raise LoadError("not_a_text_document", "file is a PDF with a text file name")
    text = decode_text(data)
    if _looks_binary(text):
        raise LoadError("not_a_text_document", "file content is binary, not text")
    if not text.strip():
        return []
    if source.mime_type == "text/markdown":
        from unstructured.partition.md import partition_md

        return partition_md(text=text)
    if source.mime_type == "text/html":
        from unstructured.partition.html import partition_html

        return partition_html(text=_strip_html_chrome(text))
    from unstructured.partition.text import partition_text

    return partition_text(text=text)


def elements_to_blocks(elements: list) -> list[Block]:
    """Blocks with heading path, heading level and page number from unstructured elements.

    Markdown and HTML headings arrive as Title elements with `category_depth` (0 for h1);
    PDF Titles are guesses from font heuristics and carry no depth, so they stay plain text.
    """
    headings: list[tuple[int, str]] = []  # (level, text), outermost first
    blocks: list[Block] = []
    for element in elements:
        text = (element.text or "").strip()
        if not text or element.category in _SKIPPED_CATEGORIES:
            continue
        depth = element.metadata.category_depth
        if element.category == "Title" and depth is not None:
            level = depth + 1
            headings = [h for h in headings if h[0] < level] + [(level, " ".join(text.split()))]
        blocks.append(
            Block(
                text=text,
                section=" > ".join(h[1] for h in headings),
                heading_level=headings[-1][0] if headings else 0,
                page_number=element.metadata.page_number,
            )
        )
    return blocks


def load_document(source: SourceFile) -> Document:
    """Read and partition one file; a file that cannot be loaded becomes a failed document."""
    title = Path(source.doc_id).stem
    try:
        data = Path(source.path).read_bytes()
    except OSError as exc:
        return Document(source, title, status=FAILED, error=f"unreadable: {exc}")
    if sha256_hex(data) != source.content_hash:  # changed since discovery: index what we read
        source = replace(source, size=len(data), content_hash=sha256_hex(data))
    try:
        blocks = elements_to_blocks(partition(source, data))
    except LoadError as exc:
        return Document(source, title, status=FAILED, error=str(exc))
    except Exception as exc:  # noqa: BLE001 - any parser failure is this file's failure
        return Document(
            source, title, status=FAILED, error=f"parse_error: {type(exc).__name__}: {exc}"
        )
    if not blocks:
        return Document(source, title, status=EMPTY, error="no_text: no text found in the file")
    first_heading = next((b.section.split(" > ")[-1] for b in blocks if b.section), None)
    return Document(source, first_heading or title, tuple(blocks), status=INDEXED)


def load_batch(sources: list[SourceFile]) -> list[Document]:
    """Load a batch of files; failures are recorded per document, never raised."""
    return [load_document(source) for source in sources]


load_task = task(
    load_batch,
    name="load",
    cache_policy=LOAD_CACHE,
    persist_result=True,
    retries=2,
    retry_delay_seconds=[1, 5],
)
