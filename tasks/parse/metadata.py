"""What a document says about itself, read per format: title, authors, dates, language and
every key it declares (tasks/core/records.py, `Metadata`); and the language of a text that
declares none, detected.

Where each format keeps it:

- Markdown: YAML front matter (a `---` line first, the YAML, then `---` or `...`); every key
  goes to `meta`; title, author(s), date / lastmod (or created / modified / updated) and
  lang / language are read from it. The front matter stays in the indexed text, as before.
- HTML: `<title>`, `<html lang>`, and each `<meta name|property|http-equiv=... content=...>`.
- PDF: the document information dictionary, and the catalog's /Lang.
- Word, PowerPoint, Excel: the core properties (docProps/core.xml of the package).
- OpenDocument: meta.xml. EPUB: the package document's (OPF) metadata. RTF: the {\\info} group.
- Email: Subject (title), From (authors), Date (created), Content-Language.

A document that states no language gets the one detected in its text (`detect_language`:
Chinese, Japanese or Korean by the dominant script, others by CLD2) when that is sure
enough; else none. Metadata that
cannot be read leaves the field empty: it never fails a document.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import email.utils
import json
import re
from collections.abc import Iterable, Mapping
from email.message import Message
from typing import Any

from tasks.core.records import Metadata
from tasks.core.scripts import Group, language_group
from tasks.parse.archives import read_member

# Text read for language detection: the first characters of the document text.
LANGUAGE_SAMPLE = 3000
# Least share of the text (percent) CLD2 must give its best language for it to be recorded.
LANGUAGE_CONFIDENCE = 90
# Least letters a text needs for its language to be detected at all.
LANGUAGE_MIN_LETTERS = 20

# The language of text whose dominant script is one language's own (tasks/core/scripts.py).
_CJK_LANGUAGES: dict[Group, str] = {"chinese": "zh", "japanese": "ja", "korean": "ko"}

_LANGUAGE_TAG = re.compile(r"[a-z]{2,3}(?:-[a-z0-9]{1,8})*")
_FRONT_MATTER = re.compile(r"\A\ufeff?---[ \t]*\r?\n(.*?)^(?:---|\.\.\.)[ \t]*$", re.S | re.M)
_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*\?>")
_PDF_DATE = re.compile(r"^D:\d{4}")

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


# --- Normalising what documents state ----------------------------------------------------------


def one_line(value: object) -> str | None:
    """The value as one line of text; None when it holds nothing."""
    text = " ".join(str(value).split()) if value is not None else ""
    return text or None


def author_list(values: Iterable[object]) -> tuple[str, ...]:
    """Authors from declared values: each a name, a list of names, or names separated by ";"
    (never by ",": "Doe, Jane" is one name); a mapping gives its "name". Each once, in order."""
    names: list[str] = []
    for value in values:
        if isinstance(value, Mapping):
            value = value.get("name")
        if isinstance(value, list | tuple):
            names += author_list(value)
            continue
        for part in str(value if value is not None else "").split(";"):
            name = one_line(part)
            if name:
                names.append(name)
    return tuple(dict.fromkeys(names))


def date_text(value: object) -> str | None:
    """A stated date in ISO 8601 where it parses (ISO text, a PDF date, an email date, a YAML
    date), else as written; None when there is none."""
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    text = one_line(value)
    if text is None:
        return None
    for kind in (dt.date, dt.datetime):  # a date stays a date: no midnight is made up
        try:
            return kind.fromisoformat(text).isoformat()
        except ValueError:
            pass
    if _PDF_DATE.match(text):
        from pikepdf.models.metadata import decode_pdf_date

        try:
            return decode_pdf_date(text).isoformat()
        except ValueError:
            return text
    try:
        return email.utils.parsedate_to_datetime(text).isoformat()
    except (TypeError, ValueError, IndexError):
        return text


def language_tag(value: object) -> str | None:
    """A declared language as a lower-case tag ("en-US" → "en-us", "pt_BR" → "pt-br"); the
    first of a list ("en, de"); None when it is no language tag."""
    text = one_line(value)
    if text is None:
        return None
    first = re.split(r"[,;]", text.lower().replace("_", "-"))[0].strip()
    return first if _LANGUAGE_TAG.fullmatch(first) else None


def _json_value(value: Any) -> Any:
    """A declared value as JSON: dates as ISO text, anything else unknown as its text."""
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(key): _json_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set):
        return [_json_value(item) for item in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def meta_json(declared: Mapping[str, Any]) -> str:
    """Declared keys as the JSON text of `Metadata.meta`; "" when there are none."""
    if not declared:
        return ""
    return json.dumps(_json_value(declared), ensure_ascii=False, sort_keys=True)


def _first(declared: Mapping[str, Any], names: tuple[str, ...]) -> Any:
    """The value of the first of `names` that `declared` holds (keys compared in lower case)."""
    lowered = {str(key).lower(): value for key, value in declared.items()}
    for name in names:
        value = lowered.get(name)
        if value not in (None, "", [], {}):
            return value
    return None


def _from_keys(declared: Mapping[str, Any], keys: Mapping[str, tuple[str, ...]]) -> Metadata:
    authors = _first(declared, keys.get("authors", ()))
    return Metadata(
        title=one_line(_first(declared, keys.get("title", ()))),
        authors=author_list([authors]) if authors is not None else (),
        created=date_text(_first(declared, keys.get("created", ()))),
        modified=date_text(_first(declared, keys.get("modified", ()))),
        language=language_tag(_first(declared, keys.get("language", ()))),
        meta=meta_json(declared),
    )


# --- Per format --------------------------------------------------------------------------------


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
    return _from_keys(front_matter(text), _FRONT_MATTER_KEYS)


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
        _add(declared, name.strip().lower(), content)
    found = _from_keys(declared, {**_HTML_META_KEYS, "title": ("title",)})
    language = language_tag(lang) if lang else found.language
    return Metadata(found.title, found.authors, found.created, found.modified, language, found.meta)


def _named(tree: Any, name: str) -> list[Any]:
    """The elements of `tree` called `name`, whatever their namespace (XHTML has one)."""
    return [e for e in tree.iter() if isinstance(e.tag, str) and _local(e.tag).lower() == name]


def _add(declared: dict[str, Any], key: str, value: str) -> None:
    """Record `value` under `key`; a key met several times holds a list of its values (one
    <meta name=author> per author)."""
    if key not in declared:
        declared[key] = value
        return
    earlier = declared[key]
    declared[key] = [*earlier, value] if isinstance(earlier, list) else [earlier, value]


def pdf_metadata(pdf: Any) -> Metadata:
    """What an open pikepdf.Pdf's information dictionary and catalog (/Lang) say."""
    declared: dict[str, Any] = {}
    try:
        for key, value in pdf.docinfo.items():
            text = one_line(value)
            if text:
                declared[str(key).lstrip("/")] = text
        lang = pdf.Root.get("/Lang")
    except Exception:  # noqa: BLE001 - a damaged info dictionary is no reason to fail the PDF
        return Metadata(meta=meta_json(declared))
    found = _from_keys(
        declared,
        {
            "title": ("title",),
            "authors": ("author",),
            "created": ("creationdate",),
            "modified": ("moddate",),
        },
    )
    language = language_tag(str(lang)) if lang is not None else None
    return Metadata(found.title, found.authors, found.created, found.modified, language, found.meta)


def _xml_root(data: bytes | None) -> Any:
    """The root element of an XML part (no entities resolved, nothing fetched); None when the
    part is missing or not XML."""
    import lxml.etree

    if not data:
        return None
    parser = lxml.etree.XMLParser(resolve_entities=False, no_network=True, recover=True)
    try:
        return lxml.etree.fromstring(data, parser)
    except lxml.etree.XMLSyntaxError:
        return None


def _local(tag: object) -> str:
    """An element's tag without its namespace ("{...}title" → "title")."""
    return str(tag).rpartition("}")[2]


def _element_values(elements: Iterable[Any]) -> dict[str, Any]:
    """Each element's text by its local name; a name met several times holds a list."""
    declared: dict[str, Any] = {}
    for element in elements:
        text = one_line(element.text) if isinstance(element.tag, str) else None
        if text is not None:  # not a comment or processing instruction, and not empty
            _add(declared, _local(element.tag), text)
    return declared


def office_metadata(data: bytes) -> Metadata:
    """What the core properties of a .docx, .pptx or .xlsx package say."""
    root = _xml_root(read_member(data, "docProps/core.xml"))
    if root is None:
        return Metadata()
    declared = _element_values(root)
    return _from_keys(
        declared,
        {
            "title": ("title",),
            "authors": ("creator",),
            "created": ("created",),
            "modified": ("modified",),
            "language": ("language",),
        },
    )


def odt_metadata(data: bytes) -> Metadata:
    """What an OpenDocument file's meta.xml says (its user-defined fields by their names)."""
    root = _xml_root(read_member(data, "meta.xml"))
    if root is None:
        return Metadata()
    fields = [element for meta in root if _local(meta.tag) == "meta" for element in meta]
    declared = _element_values(e for e in fields if _local(e.tag) != "user-defined")
    for element in fields:
        name = next((v for k, v in element.attrib.items() if _local(k) == "name"), None)
        if _local(element.tag) == "user-defined" and name and one_line(element.text):
            declared.setdefault(name, one_line(element.text))  # never over a standard field
    return _from_keys(
        declared,
        {
            "title": ("title",),
            "authors": ("initial-creator", "creator"),
            "created": ("creation-date",),
            "modified": ("date",),
            "language": ("language",),
        },
    )


def epub_metadata(data: bytes) -> Metadata:
    """What an EPUB's package document (OPF) says: its Dublin Core elements, and <meta>
    elements by their property (EPUB 3) or name (EPUB 2)."""
    container = _xml_root(read_member(data, "META-INF/container.xml"))
    if container is None:
        return Metadata()
    path = next((e.get("full-path") for e in container.iter() if _local(e.tag) == "rootfile"), None)
    package = _xml_root(read_member(data, path)) if path else None
    block = (
        next((e for e in package.iter() if _local(e.tag) == "metadata"), None)
        if package is not None
        else None
    )
    if block is None:
        return Metadata()
    declared = _element_values(e for e in block if _local(e.tag) != "meta")
    for element in block:
        if _local(element.tag) != "meta":
            continue
        if element.get("refines"):
            continue  # a detail of another element (a creator's role), not of the book
        key = element.get("property") or element.get("name")
        value = one_line(element.text) or one_line(element.get("content"))
        if key and value and key not in declared:
            declared[key] = value
    return _from_keys(
        declared,
        {
            "title": ("title",),
            "authors": ("creator",),
            "created": ("date",),
            "modified": ("dcterms:modified",),
            "language": ("language",),
        },
    )


# RTF's {\info} group: {\title ...}, {\author ...}, {\creatim\yr2024\mo5\dy1\hr9\min30}, ...
_RTF_INFO_FIELDS = rb"title|subject|author|operator|keywords|comment|doccomm|company|category"
_RTF_INFO_TEXT = re.compile(
    rb"\{\\(" + _RTF_INFO_FIELDS + rb")\s?((?:[^{}\\]|\\[^a-z]|\\[a-z]+-?\d* ?)*)\}"
)
_RTF_INFO_TIME = re.compile(rb"\{\\(creatim|revtim)((?:\\[a-z]+\d+\s*)+)\}")
_RTF_CODE_PAGE = re.compile(rb"\\ansicpg(\d+)")


def _rtf_text(raw: bytes, codec: str) -> str:
    """The text of an RTF group's contents: \\'hh bytes in the file's code page, \\uN
    characters, escaped braces and backslashes; other control words dropped."""
    out: list[str] = []
    for match in re.finditer(
        rb"\\'([0-9a-fA-F]{2})|\\u(-?\d+) ?(?:\\'[0-9a-fA-F]{2}|[^\\{}])?|\\([{}\\])"
        rb"|\\[a-z]+-?\d* ?|([^\\]+)",
        raw,
    ):
        hex_byte, code, escaped, text = match.groups()
        if hex_byte:
            out.append(bytes([int(hex_byte, 16)]).decode(codec, errors="replace"))
        elif code:
            out.append(chr(int(code) % 0x10000))
        elif escaped:
            out.append(escaped.decode())
        elif text:
            out.append(text.decode(codec, errors="replace"))
    return "".join(out)


def _rtf_time(raw: bytes) -> str | None:
    parts = {k.decode(): int(v) for k, v in re.findall(rb"\\([a-z]+)(\d+)", raw)}
    try:
        moment = dt.datetime(
            parts["yr"],
            parts.get("mo", 1),
            parts.get("dy", 1),
            parts.get("hr", 0),
            parts.get("min", 0),
        )
    except (KeyError, ValueError):
        return None
    return moment.isoformat()


def rtf_metadata(data: bytes) -> Metadata:
    """What an RTF file's {\\info} group says."""
    start = data.find(b"{\\info")
    if start < 0:
        return Metadata()
    info = data[start : start + 65536]
    page = _RTF_CODE_PAGE.search(data[:4096])
    codec = f"cp{page.group(1).decode()}" if page else "cp1252"
    try:
        "".encode(codec)
    except LookupError:
        codec = "cp1252"
    declared: dict[str, Any] = {}
    for key, raw in _RTF_INFO_TEXT.findall(info):
        text = one_line(_rtf_text(raw, codec))
        if text:
            declared.setdefault(key.decode(), text)
    for key, raw in _RTF_INFO_TIME.findall(info):
        moment = _rtf_time(raw)
        if moment:
            declared.setdefault(key.decode(), moment)
    return _from_keys(
        declared,
        {
            "title": ("title",),
            "authors": ("author",),
            "created": ("creatim",),
            "modified": ("revtim",),
        },
    )


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


# --- Language of a text that declares none -----------------------------------------------------


def warm_up() -> None:
    """Import the language detector now, not on the first document."""
    detect_language("warm up the language detector with a sentence")


def detect_language(text: str) -> str | None:
    """The language of the first LANGUAGE_SAMPLE characters of `text` as a lower-case tag;
    None when there are too few letters or the detector is not sure (not reliable, or its
    best language below LANGUAGE_CONFIDENCE percent of the text).

    Text whose dominant script is Han, kana or Hangul (tasks/core/scripts.py) is Chinese
    ("zh"), Japanese ("ja") or Korean ("ko"). Other text is CLD2's (`pycld2`, Chromium's
    compact language detector: "en", "de", ...; deterministic, about 0.15 ms a document where
    langdetect, measured first, took about 6 ms: more than parsing a Markdown note).
    """
    import pycld2

    sample = text[:LANGUAGE_SAMPLE]
    if not _has_letters(sample, LANGUAGE_MIN_LETTERS):
        return None
    group = language_group(sample)
    if group in _CJK_LANGUAGES:
        return _CJK_LANGUAGES[group]
    try:
        reliable, _, found = pycld2.detect(sample)
    except pycld2.error:  # text CLD2 cannot take (e.g. lone surrogates)
        return None
    _, code, percent, _ = found[0]
    if not reliable or code == "un" or percent < LANGUAGE_CONFIDENCE:
        return None
    return language_tag(code)


def _has_letters(text: str, count: int) -> bool:
    """Whether `text` holds at least `count` letters (stops counting there)."""
    for ch in text:
        if ch.isalpha():
            count -= 1
            if count <= 0:
                return True
    return count <= 0


def with_language(metadata: Metadata, text: str) -> Metadata:
    """`metadata` with the language detected in `text` when it declares none."""
    if metadata.language is not None:
        return metadata
    detected = detect_language(text)
    return metadata if detected is None else dataclasses.replace(metadata, language=detected)
