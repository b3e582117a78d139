"""Small real .odt, .rtf and .epub files (converted from Markdown by the bundled pandoc) and
.eml files (built with the email package), made in the tests; and a hash-embedded index of
real loaded files for the `--type` filter."""

from __future__ import annotations

import tempfile
from email.message import EmailMessage
from pathlib import Path

from tasks.core.reasons import Status
from tasks.core.records import Document
from tasks.dataset.dataset import Dataset
from tasks.dataset.schema import Fingerprint
from tasks.embed.hash_backend import HashEmbedder
from tasks.ingest.discover import discover
from tasks.parse.document import load_document
from tasks.parse.pandoc import use_bundled_pandoc
from tasks.search.params import SearchParams
from tasks.search.searcher import Searcher
from tasks.text.split import SplitSettings, split_document

MARKDOWN = """\
# Llamas

Llamas live in the Andes and carry loads for herders.

## Wool

Their wool is soft and warm.

# Alpacas

Alpacas hum when they are curious.

| Region | Herds |
|--------|-------|
| North  | 120   |
| South  | 95    |
"""


def convert(markdown: str, to: str, *extra: str) -> bytes:
    """`markdown` converted by the bundled pandoc to the format `to`."""
    import pypandoc

    use_bundled_pandoc()
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / f"out.{to}"
        pypandoc.convert_text(
            markdown, to, format="md", outputfile=str(out), extra_args=list(extra)
        )
        return out.read_bytes()


def make_odt(markdown: str = MARKDOWN) -> bytes:
    return convert(markdown, "odt")


def make_rtf(markdown: str = MARKDOWN) -> bytes:
    return convert(markdown, "rtf", "--standalone")


def make_epub(markdown: str = MARKDOWN) -> bytes:
    return convert(markdown, "epub", "--metadata", "title=Camelids")


def make_eml(attachments: dict[str, bytes] | None = None, alternative: bool = True) -> bytes:
    """An email with a text/plain body, an HTML body (as its alternative, or as a second
    inline part) and the given attachments."""
    message = EmailMessage()
    message["Subject"] = "Herd report for June"
    message["From"] = "Aino Virtanen <aino@example.org>"
    message["To"] = "herders@example.org"
    message["Date"] = "Mon, 01 Jun 2026 09:30:00 +0300"
    message.set_content("Hello herders,\n\nThe llamas crossed the pass safely.\n")
    html = (
        "<html><head><style>p {color: red}</style></head><body>"
        "<h1>Pass crossing</h1><p>The llamas crossed the pass safely.</p>"
        "<h2>Weather</h2><p>Snow is expected on Friday.</p>"
        "<script>track()</script></body></html>"
    )
    if alternative:
        message.add_alternative(html, subtype="html")
    else:
        message.make_mixed()
        part = EmailMessage()
        part.set_content(html, subtype="html", disposition="inline")
        message.attach(part)
    for name, data in (attachments or {}).items():
        maintype, subtype = TYPES_OF.get(Path(name).suffix, ("application", "octet-stream"))
        message.add_attachment(data, maintype=maintype, subtype=subtype, filename=name)
    return bytes(message)


TYPES_OF = {
    ".md": ("text", "markdown"),
    ".pdf": ("application", "pdf"),
    ".png": ("image", "png"),
    ".odt": ("application", "vnd.oasis.opendocument.text"),
}


def load_named(folder: Path, name: str) -> Document:
    """Load the file `name` of `folder` as a run would (discovered, then loaded)."""
    source = next(s for s in discover(folder).files if s.doc_id == name)
    return load_document(source)


def heading_places(
    folder: Path, name: str, data: bytes, title: str = "Llamas"
) -> dict[str, tuple[str, int | None]]:
    """Load `data` saved as `name` (made from MARKDOWN): check it is indexed with `title` (the
    first heading of MARKDOWN, unless the file declares one) and the heading path MARKDOWN
    gives, and return each block's (section, heading level) by text."""
    (folder / name).write_bytes(data)
    doc = load_named(folder, name)
    assert doc.status == Status.INDEXED, doc.error
    assert doc.title == title
    places = {block.text: (block.section, block.heading_level) for block in doc.blocks}
    assert places["Llamas live in the Andes and carry loads for herders."] == ("Llamas", 1)
    assert places["Their wool is soft and warm."] == ("Llamas > Wool", 2)
    assert places["Alpacas hum when they are curious."] == ("Alpacas", 1)
    return places


def type_filter_hits(tmp_path: Path, files: dict[str, bytes], type_name: str) -> set[str]:
    """Index `files` (loaded for real, embedded by the hash embedder) and return the doc_ids
    that a search with `--type type_name` finds."""
    corpus = tmp_path / "typed"
    corpus.mkdir(parents=True)
    for name, data in files.items():
        (corpus / name).write_bytes(data)
    documents = [load_document(source) for source in discover(corpus).files]
    embedder, split = HashEmbedder(16), SplitSettings(chunk_size=200, chunk_overlap=20)
    dataset = Dataset(str(tmp_path / "index"))
    dataset.prepare(Fingerprint.of(embedder.info, split))
    chunks = [c for d in documents for c in split_document(d, split).chunks]
    dataset.write_batch(documents, chunks, embedder.encode([c.text for c in chunks]))
    params = SearchParams(k=100, mode="vector", type=type_name)
    return {hit.doc_id for hit in Searcher(dataset).search("llamas", params)}


def make_pdf(text: str) -> bytes:
    """A one-page PDF whose text layer is `text` (one line, Helvetica)."""
    escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    stream = f"BT /F1 12 Tf 72 720 Td ({escaped}) Tj ET".encode("latin-1")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        b" /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)
