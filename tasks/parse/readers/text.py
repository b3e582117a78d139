"""Markdown, HTML and plain-text files: decoded here (tasks/parse/decode.py), partitioned by
unstructured as text.

What the bytes are beats the file name: a .md or .txt file that holds HTML is partitioned as
HTML, and one that holds XML (an RSS feed saved as .md) becomes the text of its elements.
Metadata: an HTML page's <title>, lang and <meta> elements, a Markdown file's YAML front matter
(which stays in the indexed text, as it always has); plain text has none.
"""

from __future__ import annotations

from tasks.core.reasons import Reason
from tasks.core.records import Block, Metadata, SourceFile
from tasks.parse.decode import decode_bytes, looks_binary, xml_text_blocks
from tasks.parse.elements import Markup, text_blocks
from tasks.parse.errors import LoadError
from tasks.parse.metadata import html_metadata, markdown_metadata
from tasks.parse.registry import ReadFunction, Reading, ReadOptions, register


def read_text(data: bytes, markup: Markup) -> list[Block]:
    """Blocks of a text file named as `markup`; HTML or XML content wins over the name."""
    return read_text_file(data, markup).blocks


def read_text_file(data: bytes, markup: Markup) -> Reading:
    """Blocks and metadata of a text file named as `markup` (see `read_text`)."""
    if data.startswith(b"%PDF"):
        raise LoadError(Reason.NOT_A_TEXT_DOCUMENT, "file is a PDF with a text file name")
    decoded = decode_bytes(data)
    text = decoded.text
    if looks_binary(text):
        raise LoadError(Reason.NOT_A_TEXT_DOCUMENT, "file content is binary, not text")
    if not text.strip():
        return Reading([])
    if decoded.markup == "xml":
        return Reading([Block(block) for block in xml_text_blocks(text)])
    kind: Markup = "html" if decoded.markup == "html" else markup
    metadata = (
        html_metadata(text)
        if kind == "html"
        else markdown_metadata(text)
        if kind == "md"
        else Metadata()
    )
    return Reading(text_blocks(text, kind), metadata=metadata)


def _reader(markup: Markup) -> ReadFunction:
    def read(source: SourceFile, data: bytes, options: ReadOptions) -> Reading:
        return read_text_file(data, markup)

    return read


def warm_up() -> None:
    import unstructured.partition.html  # noqa: F401
    import unstructured.partition.md  # noqa: F401
    import unstructured.partition.text  # noqa: F401


CODE = (
    "tasks.parse.decode",
    "tasks.parse.iconv_codec",
    "tasks.parse.elements",
    "tasks.parse.metadata",
)
for _markup in ("md", "html", "txt"):
    register(_markup, _reader(_markup), (Reason.NOT_A_TEXT_DOCUMENT,), warm_up=warm_up, code=CODE)
