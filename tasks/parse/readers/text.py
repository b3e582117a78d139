"""Markdown, HTML and plain-text files: decoded here (tasks/parse/decode.py), partitioned by
unstructured as text.

What the bytes are beats the file name: a .md or .txt file that holds HTML is partitioned as
HTML, and one that holds XML (an RSS feed saved as .md) becomes the text of its elements.
Metadata: an HTML page's <title>, lang and <meta> elements, a Markdown file's YAML front matter
(which stays in the indexed text, as it always has); plain text has none.
"""

from __future__ import annotations

import re
from typing import Any

from tasks.core.reasons import Reason
from tasks.core.records import Block, Metadata, SourceFile
from tasks.parse.decode import decode_bytes, looks_binary, xml_text_blocks
from tasks.parse.elements import Markup, text_blocks
from tasks.parse.errors import LoadError
from tasks.parse.metadata import add_value, from_keys, language_tag, local_name, one_line
from tasks.parse.registry import Format, ReadFunction, Reading, ReadOptions, register

# --- Metadata ----------------------------------------------------------------------------------


_FRONT_MATTER = re.compile(r"\A\ufeff?---[ \t]*\r?\n(.*?)^(?:---|\.\.\.)[ \t]*$", re.S | re.M)
_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*\?>")

# Front matter keys (compared in lower case) of each field, the first one present wins.
_FRONT_MATTER_KEYS = {
    "title": ("title",),
    "authors": ("authors", "author", "creator"),
    "created": ("date", "created", "published", "pubdate"),
    "modified": ("lastmod", "modified", "updated", "last_modified"),
    "language": ("lang", "language", "locale"),
}
# HTML <meta> names (lower case) of each field, the first one present wins.
_HTML_META_KEYS = {
    "authors": ("author", "dc.creator", "dcterms.creator", "article:author"),
    "created": ("date", "dc.date", "dcterms.created", "article:published_time", "dc.date.created"),
    "modified": ("last-modified", "dcterms.modified", "article:modified_time", "dc.date.modified"),
    "language": ("content-language", "dc.language", "language", "og:locale"),
}


def front_matter(text: str) -> dict[str, Any]:
    """The YAML front matter at the start of a Markdown text as a mapping; {} when there is
    none or it is not a YAML mapping."""
    import yaml

    match = _FRONT_MATTER.match(text)
    if match is None:
        return {}
    try:
        loaded = yaml.safe_load(match.group(1))
    except yaml.YAMLError:
        return {}
    return {str(key): value for key, value in loaded.items()} if isinstance(loaded, dict) else {}


def markdown_metadata(text: str) -> Metadata:
    """What a Markdown text's YAML front matter says."""
    return from_keys(front_matter(text), _FRONT_MATTER_KEYS)


def html_metadata(html: str) -> Metadata:
    """What an HTML page's <title>, lang attribute and <meta> elements say (XHTML too)."""
    import lxml.etree
    import lxml.html

    try:  # lxml refuses text that declares its encoding: XHTML's <?xml ...?> goes first
        tree = lxml.html.document_fromstring(_XML_DECLARATION.sub("", html, count=1))
    except (ValueError, lxml.etree.ParserError):
        return Metadata()
    declared: dict[str, Any] = {}
    title = next((one_line(e.text_content()) for e in _named(tree, "title")), None)
    if title:
        declared["title"] = title
    lang = tree.get("lang") or tree.get("{http://www.w3.org/XML/1998/namespace}lang")
    if lang:
        declared["lang"] = lang
    for meta in _named(tree, "meta"):
        name = meta.get("name") or meta.get("property") or meta.get("http-equiv")
        content = one_line(meta.get("content"))
        if not name or content is None:
            continue
        add_value(declared, name.strip().lower(), content)
    found = from_keys(declared, {**_HTML_META_KEYS, "title": ("title",)})
    language = language_tag(lang) if lang else found.language
    return Metadata(found.title, found.authors, found.created, found.modified, language, found.meta)


def _named(tree: Any, name: str) -> list[Any]:
    """The elements of `tree` called `name`, whatever their namespace (XHTML has one)."""
    return [e for e in tree.iter() if isinstance(e.tag, str) and local_name(e.tag).lower() == name]


# --- Reading -----------------------------------------------------------------------------------


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
FORMATS: dict[Markup, Format] = {
    "md": Format("md", "text/markdown", (".md", ".markdown")),
    "html": Format("html", "text/html", (".html", ".htm")),
    "txt": Format("txt", "text/plain", (".txt",)),
}
for _markup, _format in FORMATS.items():
    register(_format, _reader(_markup), (Reason.NOT_A_TEXT_DOCUMENT,), warm_up=warm_up, code=CODE)
