"""What documents state about themselves, normalised the same way for every format, and the
language of a text that declares none, detected.

Each reader reads its format's metadata beside it (tasks/parse/readers/: Markdown front matter
and HTML <meta> in text.py, the PDF information dictionary in pdf.py, Office core properties in
office.py, OpenDocument meta.xml in odt.py, EPUB's OPF in epub.py, RTF's {\\info} group in
rtf.py, an email's headers in eml.py) and gives it as `Metadata` (tasks/core/records.py) through
`from_keys` and the normalisers here. Metadata that cannot be read leaves the field empty: it
never fails a document.

A document that states no language gets the one detected in its text (`detect_language`:
Chinese, Japanese or Korean by the dominant script, others by CLD2) when that is sure
enough; else none.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import email.utils
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from tasks.core.records import Metadata
from tasks.core.scripts import Group, language_group

# Text read for language detection: the first characters of the document text.
LANGUAGE_SAMPLE = 3000
# Least share of the text (percent) CLD2 must give its best language for it to be recorded.
LANGUAGE_CONFIDENCE = 90
# Least letters a text needs for its language to be detected at all.
LANGUAGE_MIN_LETTERS = 20

# The language of text whose dominant script is one language's own (tasks/core/scripts.py).
_CJK_LANGUAGES: dict[Group, str] = {"chinese": "zh", "japanese": "ja", "korean": "ko"}

_LANGUAGE_TAG = re.compile(r"[a-z]{2,3}(?:-[a-z0-9]{1,8})*")
_PDF_DATE = re.compile(r"^D:\d{4}")


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


def from_keys(declared: Mapping[str, Any], keys: Mapping[str, tuple[str, ...]]) -> Metadata:
    """Metadata from declared keys: each field from the first of its `keys` names present,
    normalised; every declared key in `meta`."""
    authors = _first(declared, keys.get("authors", ()))
    return Metadata(
        title=one_line(_first(declared, keys.get("title", ()))),
        authors=author_list([authors]) if authors is not None else (),
        created=date_text(_first(declared, keys.get("created", ()))),
        modified=date_text(_first(declared, keys.get("modified", ()))),
        language=language_tag(_first(declared, keys.get("language", ()))),
        meta=meta_json(declared),
    )


# --- Parts of XML documents (Office, OpenDocument and EPUB packages) --------------------------


def add_value(declared: dict[str, Any], key: str, value: str) -> None:
    """Record `value` under `key`; a key met several times holds a list of its values (one
    <meta name=author> per author)."""
    if key not in declared:
        declared[key] = value
        return
    earlier = declared[key]
    declared[key] = [*earlier, value] if isinstance(earlier, list) else [earlier, value]


def xml_root(data: bytes | None) -> Any:
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


def local_name(tag: object) -> str:
    """An element's tag without its namespace ("{...}title" → "title")."""
    return str(tag).rpartition("}")[2]


def element_values(elements: Iterable[Any]) -> dict[str, Any]:
    """Each element's text by its local name; a name met several times holds a list."""
    declared: dict[str, Any] = {}
    for element in elements:
        text = one_line(element.text) if isinstance(element.tag, str) else None
        if text is not None:  # not a comment or processing instruction, and not empty
            add_value(declared, local_name(element.tag), text)
    return declared


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
