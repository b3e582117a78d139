# Over 300 lines: one ordered chain of evidence for an encoding, best read in one place.
"""Text files' bytes to text without garbling them, and HTML/XML told apart by content.

Order of evidence (the first that applies wins):

1. A byte-order mark (`w3lib.encoding.read_bom`).
2. UTF-16/32 without a BOM (NUL bytes) and ISO-2022 (7-bit data with escapes) when
   charset-normalizer recognises them: such bytes would pass as UTF-8 or ASCII.
3. What the file declares in its first 8 KiB: an XML declaration's `encoding=`, or a
   `<meta charset>` / `<meta http-equiv="Content-Type" content="...; charset=...">` tag
   (bs4's `EncodingDetector.find_declared_encoding`). The label goes to the codec a browser
   decodes it with: the WHATWG label table (`webencodings`), widened to the Python superset
   (`w3lib.encoding.resolve_encoding`: shift_jis → cp932, gbk → gb18030, euc-kr → cp949,
   big5 → big5hkscs, iso-8859-1 → cp1252, ...). Two rules of ours on top: a declaration
   is used only when the bytes decode with it strictly, and bytes that are valid UTF-8 with
   non-ASCII sequences beat a declared legacy code page (a page re-saved as UTF-8 keeps its
   old meta tag far more often than legacy bytes happen to form valid UTF-8).
4. Valid UTF-8.
5. A guess (`guess`): charset-normalizer's candidates and a fixed list of the code pages
   documents use, each decoded strictly and scored (see `guess` for the few tie-breaks that
   charset-normalizer lacks). Nothing plausible: LoadError(not_a_text_document) instead of
   mojibake.

EUC-TW has no Python codec: tasks/parse/iconv_codec.py provides one through the C library's
iconv where that has it.

`sniff_markup` looks at content, not the file name: a `.md` or `.txt` file that starts with
`<?xml`, `<!DOCTYPE html`, `<html`, `<rss`, `<feed` (or has a `<meta charset>` tag next to
`<head>`/`<body>`/`<title>` in its first KiB) is HTML or XML; `xml_text_blocks` turns XML
(RSS and Atom included) into the text of its elements.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

import charset_normalizer
import webencodings
from w3lib.encoding import read_bom, resolve_encoding

from tasks.core.charset_compat import ISO_2022, WIDE_UTF, language_coherence, mess
from tasks.core.reasons import Reason
from tasks.core.scripts import dominant_script, script_of
from tasks.parse import iconv_codec
from tasks.parse.errors import LoadError

iconv_codec.register()

# -- labels -----------------------------------------------------------------------------------


def codec_for_label(label: str) -> str | None:
    """The Python codec a browser decodes a declared label with; None if unknown or unusable.

    webencodings knows the WHATWG labels (x-sjis, csshiftjis, ks_c_5601-1987, x-x-big5, ...);
    w3lib widens the codec to its Python superset (gbk → gb18030, euc_kr → cp949, latin-1 →
    cp1252, ...) and reads the labels WHATWG lacks through Python's aliases (euc-tw, cp866).
    Unusable, because a declaration written in ASCII bytes cannot be right about them: 16- and
    32-bit encodings (browsers then read the page as UTF-8; test_declared_labels_map_to_the_
    superset_browsers_use), and WHATWG's `replacement` (iso-2022-kr, hz-gb-2312: "do not
    decode"). UTF-7 w3lib refuses itself.
    """
    label = label.strip().strip("\"'")
    whatwg = webencodings.lookup(label)
    if whatwg is not None:
        if whatwg.name in ("utf-16le", "utf-16be", "replacement"):
            return None
        label = whatwg.codec_info.name
    codec = resolve_encoding(label)
    return None if codec is None or codec.startswith(("utf-16", "utf-32")) else codec


# -- declarations and content sniffing --------------------------------------------------------

_HEAD_WINDOW = 8192


def declared_encoding(data: bytes) -> tuple[str | None, str | None]:
    """(label, where) that the file declares in its first 8 KiB; where is "xml" or "meta"."""
    from bs4.dammit import EncodingDetector  # here: bs4 is 0.1 s that finding files never needs

    head = data[:_HEAD_WINDOW]
    for where, is_html in (("xml", False), ("meta", True)):
        label = EncodingDetector.find_declared_encoding(head, is_html, search_entire_document=True)
        if label:
            return label, where
    return None, None


_LEADING_JUNK = re.compile(rb"^(?:\s|<!--.*?-->)*", re.S)


def sniff_markup(data: bytes) -> str | None:
    """ "html", "xml" or None, from the bytes only (never the file name)."""
    head = data[:4096]
    head = head[len(read_bom(head)[1] or b"") :]
    if b"\x00" in head[:64]:  # wide text: look at its ASCII bytes
        head = head.replace(b"\x00", b"")
    junk = _LEADING_JUNK.match(head)
    start = head[junk.end() if junk else 0 :].lower()
    if start.startswith(b"<?xml"):  # XHTML starts so too: look for its html element
        return "html" if (b"<!doctype html" in start or b"<html" in start) else "xml"
    if start.startswith((b"<!doctype html", b"<html")):
        return "html"
    if start.startswith((b"<rss", b"<feed", b"<rdf:rdf")):
        return "xml"
    if re.search(rb"<meta\s[^>]*(charset|http-equiv)", head[:1024].lower()) and re.search(
        rb"<(head|body|title)[\s>]", head.lower()
    ):
        return "html"
    return None


# -- guessing ---------------------------------------------------------------------------------

# Code pages always tried after charset-normalizer's own candidates, which stop short of them
# when something exotic already decodes cleanly: it offers no KOI8 for the "ru koi8_r" and "uk
# koi8_u" sentences of test_one_undeclared_sentence_is_read_in_its_code_page (cp932 half-width
# katakana win), no cp1252 for FINNISH_SHORT (only hp_roman8, mac_iceland, mac_latin2), and
# nothing for EUC-TW, which it has no codec for (EUC-TW/_ude_euc-tw1.md of the shared files).
_CODE_PAGES = [
    "cp1252", "cp1250", "cp1251", "cp1253", "cp1254", "cp1255", "cp1256", "cp1257", "koi8-r",
    "koi8-u", "iso8859-2", "iso8859-5", "iso8859-7", "iso8859-8", "iso8859-15", "cp866",
    "cp932", "euc_jp", "gb18030", "big5hkscs", "cp949", "euc_tw",
]  # fmt: skip
# Near-ties go to windows-1252, as browsers assume, rather than to hp_roman8 ("Hyvðð" for
# FINNISH_SHORT), cp850 (windows-1252/_ude_2.md) or cp1258 (iso-8859-1/_ude_3.md), which
# charset-normalizer finds a little more coherent; also needed by the "sv cp1252" sentence.
_BROWSER_DEFAULT, _BROWSER_DEFAULT_PRIOR = "cp1252", 0.03

# A decoding below this quality is refused: the file fails as not_a_text_document instead of
# being indexed as mojibake (bytes(range(256)), tests/test_eml.py). For text in another
# script than Latin, quality is 1 minus charset-normalizer's mess ratio: this is its own
# default threshold (0.2 of mess).
MIN_PLAUSIBILITY = 0.8
_SAMPLE = 20000  # characters judged per decoding

# Letters that Western, Nordic, Central and Eastern European languages use together.
_COMMON_LATIN = {
    "fr": "àâæçéèêëîïôœùûüÿ",
    "de": "äöüß",
    "es": "áéíñóúü",
    "pt": "àáâãçéêíóôõú",
    "it": "àèéìíîòóù",
    "nl": "éèëïöü",
    "nordic": "åäöæøéü",
    "fi": "äöåšž",
    "is": "áéíóúýþæöð",
    "cs": "áčďéěíňóřšťúůýž",
    "pl": "ąćęłńóśźż",
    "hu": "áéíóöőúüű",
    "ro": "ăâîșțşţ",
    "tr": "çğıöşüâî",
    "lv": "āčēģīķļņšūž",
    "lt": "ąčęėįšųūž",
    "et": "äöõüšž",
    "hr": "čćđšž",
    "ca": "àçéèíïòóúü·",
}
# Typographic characters that are normal next to a letter (windows-1252/_ude_2.md has them).
_PUNCT_OK = set("«»“”„‚–—…•€£§°©®™±×÷½¼¾¡¿\u00a0‹›′″\u2019\u2018\u00b7\u00ad")
_ASCII_RUNS = re.compile(r"[\x00-\x7f]+")


def plausibility(text: str) -> float:
    """How much Latin-script text looks like one language: 1 is clean, 0 is garbage.

    charset-normalizer's mess ratio cannot rank Western code pages on short text: it scores
    FINNISH (tests/test_decode.py) 0.165 for its many "ää" but the same bytes read as
    mac_iceland ("Hyv‰‰ p‰iv‰‰") 0.0, and FRENCH read as cp1257 ("dķpend Ó la fois") 0.0
    against 0.042 for the real text (test_short_latin1_text_is_not_read_as_another_code_page,
    and the cs, pl, hu and tr sentences). Judged here, non-ASCII characters only:
    - good: the Latin letters that one language uses together (French àéç, Czech čřů);
    - bad: the other Latin letters (Czech read as cp1252 gives øèù, which no language
      combines); a symbol, digit or mark stuck to a letter (Polish read as cp1256: "rodz¹",
      "rَwni"); C1 controls, U+FFFD and private-use characters, which no text holds (the cs
      cp1250 sentence).
    """
    sample = text[:_SAMPLE]
    bad = 0
    latin: dict[str, int] = {}
    for i, ch in enumerate(sample):
        if ch.isascii():
            continue
        category = unicodedata.category(ch)
        if category in ("Cc", "Co") or ch == "\ufffd":
            bad += 1
        elif category[0] == "L":
            if script_of(ch) == "latin":
                latin[ch.lower()] = latin.get(ch.lower(), 0) + 1
        elif category[0] in "SPNM" and ch not in _PUNCT_OK:
            before = sample[i - 1] if i else " "
            after = sample[i + 1] if i + 1 < len(sample) else " "
            bad += before.isalpha() or after.isalpha()
    good = max(
        (sum(n for c, n in latin.items() if c in letters) for letters in _COMMON_LATIN.values()),
        default=0,
    )
    bad += sum(latin.values()) - good
    judged = good + bad
    return 1.0 if judged == 0 else max(0.0, (good - bad) / judged)


def _quality(sample: str) -> float:
    """0..1: `plausibility` for Latin text (or text without non-ASCII letters); for any other
    script 1 minus charset-normalizer's mess ratio, which tells the CJK, Cyrillic, Greek,
    Hebrew and Arabic files of the shared encodings apart on its own: the larger of the
    ratios of the whole sample (Latin words with a stray foreign letter are mess) and of its
    non-ASCII text alone (mostly ASCII markup dilutes the mess of a few wrongly decoded
    phrases: GB2312_HTML of tests/test_decode.py as iso8859-5 is 4% mess whole, 48% alone)."""
    foreign = _ASCII_RUNS.sub(" ", sample)  # the non-ASCII text, its words kept apart
    if dominant_script(foreign) in (None, "latin"):
        return plausibility(sample)
    return 1.0 - max(mess(sample), mess(foreign))


def guess(data: bytes) -> tuple[str, str]:
    """(text, codec) for undeclared, non-UTF bytes: the best strict decoding.

    Candidates: charset-normalizer's (widened to the browsers' supersets by w3lib), then
    _CODE_PAGES. A decoding must reach MIN_PLAUSIBILITY (`_quality`); the highest quality plus
    a quarter of charset-normalizer's language coherence (which the "ru koi8_r" and "ja
    euc_jp" sentences need: cp1251 and cp949 read them as cleanly) plus the windows-1252
    prior wins. Nothing fits: LoadError(not_a_text_document).
    """
    found = [resolve_encoding(match.encoding) for match in charset_normalizer.from_bytes(data)]
    best: tuple[float, str, str] | None = None
    for codec in dict.fromkeys([*filter(None, found), *_CODE_PAGES]):
        text = _decode_strictly(data, codec)
        if text is None:
            continue
        sample = text[:_SAMPLE]
        quality = _quality(sample)
        if quality < MIN_PLAUSIBILITY:
            continue
        score = quality + 0.25 * language_coherence(sample)
        score += _BROWSER_DEFAULT_PRIOR if codec == _BROWSER_DEFAULT else 0.0
        if best is None or score > best[0] + 1e-9:
            best = (score, text, codec)
    if best is None:
        raise LoadError(Reason.NOT_A_TEXT_DOCUMENT, "no text encoding fits the file's bytes")
    return best[1], best[2]


# -- decoding ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decoded:
    """A text file's text and how it was decoded."""

    text: str
    encoding: str  # the Python codec that produced `text`
    how: str  # bom | wide | escape | declared-xml | declared-meta | utf-8 | guessed
    declared: str | None = None  # the label the file declared, if any
    markup: str | None = None  # "html", "xml" or None, sniffed from the content


def _decode_strictly(data: bytes, codec: str) -> str | None:
    """The text when `codec` decodes all of `data`, else None."""
    try:
        return data.decode(codec)
    except (UnicodeDecodeError, LookupError):
        return None


def _utf8_with_non_ascii(data: bytes) -> bool:
    return not data.isascii() and _decode_strictly(data, "utf-8") is not None


def _recognised(data: bytes, families: tuple[str, ...]) -> tuple[str, str] | None:
    """charset-normalizer's best reading of `data`, (text, codec), if its codec is of one of
    `families` (its spelling: utf_16, iso2022)."""
    best = charset_normalizer.from_bytes(data).best()
    if best is None or not best.encoding.startswith(families):
        return None
    return str(best), resolve_encoding(best.encoding) or best.encoding


def decode_bytes(data: bytes) -> Decoded:
    """Decode a text file's bytes (the module docstring gives the order of evidence)."""
    markup = sniff_markup(data)
    bom_codec, bom = read_bom(data)
    if bom_codec is not None and bom is not None:
        text = _decode_strictly(data[len(bom) :], bom_codec)
        if text is not None:
            return Decoded(text, bom_codec, "bom", markup=markup)
    # Bytes that pass as UTF-8 but are not: UTF-16/32 without a BOM (NUL bytes; the nobom-*
    # files of the shared UTF-16LE/BE and UTF-32LE/BE folders) and ISO-2022 (7-bit with
    # escapes; iso-2022-jp/_ude_1.md). charset-normalizer tells which.
    if b"\x00" in data[:_HEAD_WINDOW]:
        recognised = _recognised(data, WIDE_UTF)
        if recognised is not None:
            return Decoded(*recognised, "wide", markup=markup)
    if data.isascii() and b"\x1b" in data:
        recognised = _recognised(data, ISO_2022)
        if recognised is not None:
            return Decoded(*recognised, "escape", markup=markup)
    label, where = declared_encoding(data)
    declared = codec_for_label(label) if label else None
    if declared:
        # test_valid_utf8_beats_a_stale_declaration_and_a_false_one_is_not_believed
        if declared != "utf-8" and _utf8_with_non_ascii(data):
            return Decoded(data.decode("utf-8"), "utf-8", "utf-8", label, markup)
        text = _decode_strictly(data, declared)
        if text is not None:
            return Decoded(text, declared, f"declared-{where}", label, markup)
    text = _decode_strictly(data, "utf-8")
    if text is not None:
        return Decoded(text, "utf-8", "utf-8", label, markup)
    text, codec = guess(data)
    return Decoded(text, codec, "guessed", label, markup)


def decode_text(data: bytes) -> str:
    """A text file's text; LoadError(not_a_text_document) when no encoding fits."""
    return decode_bytes(data).text


# Control characters other than tab, line feed, form feed and carriage return, and the
# replacement character.
_CONTROL = re.compile("[\x00-\x08\x0b\x0e-\x1f\ufffd]")


def looks_binary(text: str) -> bool:
    """True when decoded 'text' is mostly control characters: a binary file with a text name."""
    sample = text[:4096]
    if not sample:
        return False
    control = len(_CONTROL.findall(sample))
    return control / len(sample) > 0.05


# -- XML content ------------------------------------------------------------------------------


def _markup_fragment_text(fragment: str) -> str:
    """The text of an HTML fragment (an RSS description), tags dropped."""
    import lxml.etree
    import lxml.html

    try:
        root = lxml.html.fragment_fromstring(fragment, create_parent="div")
    except (ValueError, lxml.etree.ParserError):
        return " ".join(re.sub(r"<[^>]+>", " ", fragment).split())
    return " ".join(root.text_content().split())


def xml_text_blocks(text: str) -> list[str]:
    """The text of an XML document's elements (RSS and Atom included), one block each, in order.

    Parsed with entity resolution and network access off (no XXE); markup inside CDATA or
    escaped in element text (RSS descriptions) is reduced to its text. lxml refuses a str that
    still carries an encoding declaration, so the declaration is removed first.
    """
    from lxml import etree

    parser = etree.XMLParser(
        recover=True,
        resolve_entities=False,
        no_network=True,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )
    body = re.sub(r"^\s*<\?xml[^>]*\?>", "", text.lstrip("\ufeff"), count=1)
    try:
        root = etree.fromstring(body.encode("utf-8"), parser)
    except etree.XMLSyntaxError:
        return []
    if root is None:
        return []
    blocks = []
    for element in root.iter():
        if not isinstance(element.tag, str):
            continue
        piece = (element.text or "").strip()
        if "<" in piece and ">" in piece:
            piece = _markup_fragment_text(piece)
        if piece:
            blocks.append(" ".join(piece.split()))
        tail = " ".join((element.tail or "").split())
        if tail and element.getparent() is not None:
            blocks.append(tail)
    return blocks
