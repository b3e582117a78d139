"""Load source files into documents with unstructured's partitioners, fully offline.

Markdown, HTML and plain text are decoded here (BOMs, BOM-less UTF-16/32, ISO-2022-JP and
legacy code pages via charset-normalizer) and handed to unstructured as text; PDFs go to
`partition_pdf(strategy="fast")`, which reads the text layer. Headings become a section path
that every following block carries until a heading of the same or a higher level.
"""

from __future__ import annotations

import codecs
import io
from dataclasses import dataclass, replace
from pathlib import Path

import charset_normalizer
from prefect import task

from tasks import faults, offline
from tasks.cache_keys import LOAD_CACHE, PERSISTED
from tasks.parse_worker import WORKER
from tasks.records import INDEXED, Block, Document, SourceFile, file_title, sha256_hex

# Element categories that are not document text.
_SKIPPED_CATEGORIES = {"Image", "PageBreak", "Header", "Footer", "PageNumber"}

# unstructured's documented switch for "no language detection": the index does not use the
# detected language, and detecting it cost a third of a Markdown file's parsing time.
NO_LANGUAGE_DETECTION = [""]

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


class NoText(LoadError):
    """A readable file with no text in it: the document is empty, not failed."""


@dataclass(frozen=True)
class LoadSettings:
    """Limits on loading; part of the load cache key."""

    max_file_bytes: int = 256 * 2**20
    parse_timeout: float = 300.0  # seconds per file; 0 parses in-process with no time limit


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


def _has_text(elements: list) -> bool:
    return any((element.text or "").strip() for element in elements)


def partition_pdf_bytes(data: bytes) -> list:
    """Elements of a PDF's text layer, with clear reasons when there is none.

    An encrypted PDF is opened with the empty user password or fails as `encrypted`. When the
    text layer yields nothing (e.g. a truncated file with a broken cross-reference table),
    the PDF is rebuilt by qpdf and parsed once more; a PDF whose pages hold only images is
    empty with reason `no_text_layer`.
    """
    import pikepdf
    from unstructured.partition.pdf import partition_pdf

    offline.check_pdf_support()

    def parse(pdf_bytes: bytes) -> list:
        return partition_pdf(file=io.BytesIO(pdf_bytes), strategy="fast", languages=["eng"])

    try:
        pdf = pikepdf.open(io.BytesIO(data))  # tries the empty password, repairs what it can
    except pikepdf.PasswordError:
        raise LoadError("encrypted", "the PDF needs a password (the empty one was tried)") from None
    except pikepdf.PdfError as exc:
        elements = parse(data)  # beyond qpdf's repair; pdfminer may still read some of it
        if _has_text(elements):
            return elements
        raise LoadError("damaged_pdf", str(exc).split(": ", 1)[-1]) from None
    with pdf:
        elements = parse(data)
        if _has_text(elements):
            return elements
        rebuilt = io.BytesIO()
        pdf.save(rebuilt)
        elements = parse(rebuilt.getvalue())
        if _has_text(elements):
            return elements
        if any(len(page.images) for page in pdf.pages):
            raise NoText("no_text_layer", "the pages are images with no text layer (scanned?)")
        raise NoText("no_text", f"no text found on {len(pdf.pages)} page(s)")


def partition(source: SourceFile, data: bytes) -> list:
    """unstructured elements of one file, by MIME type."""
    offline.install_unstructured_nlp()
    if source.mime_type == "application/pdf":
        if b"%PDF-" not in data[:1024]:
            raise LoadError("not_a_pdf", "file has a .pdf name but no PDF header")
        return partition_pdf_bytes(data)
    if data.startswith(b"%PDF"):
        raise LoadError("not_a_text_document", "file is a PDF with a text file name")
    text = decode_text(data)
    if _looks_binary(text):
        raise LoadError("not_a_text_document", "file content is binary, not text")
    if not text.strip():
        return []
    if source.mime_type == "text/markdown":
        from unstructured.partition.md import partition_md

        return partition_md(text=text, languages=NO_LANGUAGE_DETECTION)
    if source.mime_type == "text/html":
        from unstructured.partition.html import partition_html

        return partition_html(text=_strip_html_chrome(text), languages=NO_LANGUAGE_DETECTION)
    from unstructured.partition.text import partition_text

    return partition_text(text=text, languages=NO_LANGUAGE_DETECTION)


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


def warm_up() -> None:
    """Import every partitioner and build the sentence splitter now, not on the first file."""
    import unstructured.partition.html  # noqa: F401
    import unstructured.partition.md  # noqa: F401
    import unstructured.partition.text  # noqa: F401

    offline.install_unstructured_nlp()
    offline.sentence_pipeline()
    offline.check_pdf_support()


def load_document(source: SourceFile) -> Document:
    """Read and partition one file; a file that cannot be loaded becomes a failed document."""
    try:
        data = Path(source.path).read_bytes()
    except FileNotFoundError:
        return Document.failed(source, "vanished: deleted after discovery")
    except OSError as exc:
        return Document.failed(source, f"unreadable: {exc}")
    if not data:
        return Document.empty(source, "empty_file: the file has no bytes")
    digest = sha256_hex(data)
    if digest != source.content_hash:  # changed since discovery: index what we read
        source = replace(source, size=len(data), content_hash=digest)
    try:
        blocks = elements_to_blocks(partition(source, data))
    except NoText as exc:
        return Document.empty(source, str(exc))
    except LoadError as exc:
        return Document.failed(source, str(exc))
    except Exception as exc:  # noqa: BLE001 - any parser failure is this file's failure
        return Document.failed(source, f"parse_error: {type(exc).__name__}: {exc}")
    if not blocks:
        return Document.empty(source, "no_text: no text found in the file")
    first_heading = next((b.section.split(" > ")[-1] for b in blocks if b.section), None)
    return Document(source, first_heading or file_title(source), tuple(blocks), status=INDEXED)


def load_batch(
    sources: list[SourceFile], settings: LoadSettings = LoadSettings()
) -> list[Document]:
    """Load a batch of files; failures are recorded per document, never raised.

    Files over the size limit are not read. With a parse timeout, each file is parsed in the
    worker process (tasks/parse_worker.py), which is replaced if a file overruns it.
    """
    faults.maybe_fail("load")
    documents = []
    for source in sources:
        faults.maybe_crash("load")
        if source.size > settings.max_file_bytes:
            limit = settings.max_file_bytes / 2**20
            error = f"too_large: {source.size / 2**20:.1f} MiB is over the {limit:g} MiB limit"
            documents.append(Document.failed(source, error))
        elif settings.parse_timeout:
            documents.append(WORKER.load(source, settings.parse_timeout))
        else:
            documents.append(load_document(source))
    return documents


load_task = task(
    load_batch,
    name="load",
    cache_policy=LOAD_CACHE,
    **PERSISTED,
    retries=2,
    retry_delay_seconds=[1, 5],
)
