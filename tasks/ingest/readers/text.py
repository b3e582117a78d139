"""Markdown, HTML and plain-text files: decoded here (tasks/ingest/decode.py), partitioned by
unstructured as text.

What the bytes are beats the file name: a .md or .txt file that holds HTML is partitioned as
HTML, and one that holds XML (an RSS feed saved as .md) becomes the text of its elements.
"""

from __future__ import annotations

from tasks.core.reasons import Reason
from tasks.core.records import Block, SourceFile
from tasks.ingest.decode import decode_bytes, looks_binary, xml_text_blocks
from tasks.ingest.elements import Markup, text_blocks
from tasks.ingest.errors import LoadError
from tasks.ingest.registry import ReadFunction, Reading, ReadOptions, register


def read_text(data: bytes, markup: Markup) -> list[Block]:
    """Blocks of a text file named as `markup`; HTML or XML content wins over the name."""
    if data.startswith(b"%PDF"):
        raise LoadError(Reason.NOT_A_TEXT_DOCUMENT, "file is a PDF with a text file name")
    decoded = decode_bytes(data)
    text = decoded.text
    if looks_binary(text):
        raise LoadError(Reason.NOT_A_TEXT_DOCUMENT, "file content is binary, not text")
    if not text.strip():
        return []
    if decoded.markup == "xml":
        return [Block(block) for block in xml_text_blocks(text)]
    return text_blocks(text, "html" if decoded.markup == "html" else markup)


def _reader(markup: Markup) -> ReadFunction:
    def read(source: SourceFile, data: bytes, options: ReadOptions) -> Reading:
        return Reading(read_text(data, markup))

    return read


def warm_up() -> None:
    import unstructured.partition.html  # noqa: F401
    import unstructured.partition.md  # noqa: F401
    import unstructured.partition.text  # noqa: F401


CODE = ("tasks.ingest.decode", "tasks.ingest.iconv_codec", "tasks.ingest.elements")
for _markup in ("md", "html", "txt"):
    register(_markup, _reader(_markup), (Reason.NOT_A_TEXT_DOCUMENT,), warm_up=warm_up, code=CODE)
