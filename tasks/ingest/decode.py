"""Text files' bytes to text without garbling them, and HTML/XML told apart by content.

Order of evidence (the first that applies wins):

1. A byte-order mark (UTF-32 before UTF-16: the UTF-32-LE BOM starts with UTF-16-LE's).
2. BOM-less UTF-16/32, from where the zero bytes of mostly-ASCII text sit.
3. ISO-2022-JP/KR escape sequences in 7-bit data.
4. What the file declares in its first 8 KiB: an XML declaration's `encoding=`, an HTML
   `<meta charset=...>` or `<meta http-equiv="Content-Type" content="...; charset=...">`.
   Labels map to the superset a browser decodes them with (`x-sjis`, `shift-jis` → cp932,
   `gb2312` → gb18030, `euc-kr` → cp949, `big5` → big5hkscs, `iso-8859-1` → cp1252, ...). A
   declaration is used only when the bytes decode with it strictly, and bytes that are valid
   UTF-8 with non-ASCII sequences beat a declared legacy code page (a page re-saved as UTF-8
   keeps its old meta tag far more often than legacy bytes happen to form valid UTF-8).
5. Valid UTF-8.
6. A guess among charset-normalizer's candidates (widened to their supersets) and a fixed list
   of common code pages (charset-normalizer returns none at all for some files, e.g. a
   Shift-JIS page full of ■◆★※). Each strict decoding is scored by `plausibility`: letters
   of one language or script, no symbols or case flips inside words, no C1 or private-use
   characters, Latin letters that one language uses together, CJK text made of frequent
   characters. A decoding must reach MIN_PLAUSIBILITY; among those, `coherence` (letter
   frequencies of the main script) and a small prior for widely used code pages break
   near-ties. This is what keeps a short ISO-8859-1 French text ("dépend à la fois") from
   becoming a Baltic or Central European code page ("dķpend Ó la fois"). Nothing plausible:
   LoadError(not_a_text_document) instead of mojibake.

EUC-TW has no Python codec; tasks/ingest/iconv_codec.py provides one through the C library's
iconv where that has it.

`sniff_markup` looks at content, not the file name: a `.md` or `.txt` file that starts with
`<?xml`, `<!DOCTYPE html`, `<html`, `<rss`, `<feed` (or has a `<meta charset>` tag next to
`<head>`/`<body>`/`<title>` in its first KiB) is HTML or XML; `xml_text_blocks` turns XML
(RSS and Atom included) into the text of its elements.
"""

from __future__ import annotations

import codecs
import re
import unicodedata
from dataclasses import dataclass
from functools import cache, lru_cache

from tasks.core.reasons import Reason
from tasks.ingest import iconv_codec
from tasks.ingest.errors import LoadError

iconv_codec.register()

# -- labels -----------------------------------------------------------------------------------

_ALIASES = {
    # Japanese
    **dict.fromkeys(
        [
            "x-sjis", "shift-jis", "shift_jis", "sjis", "s-jis", "shiftjis", "ms_kanji",
            "ms-kanji", "csshiftjis", "windows-31j", "cswindows31j", "ms932", "cp932",
            "x-ms-cp932", "windows-932", "shift_jis-2004", "shift_jisx0213",
        ],
        "cp932",
    ),
    **dict.fromkeys(
        [
            "euc-jp", "euc_jp", "x-euc-jp", "eucjp", "cseucpkdfmtjapanese", "ujis",
            "euc-jis-2004", "euc-jisx0213",
        ],
        "euc_jp",
    ),
    **dict.fromkeys(
        ["iso-2022-jp", "iso2022jp", "csiso2022jp", "iso-2022-jp-2", "iso-2022-jp-ext"],
        "iso2022_jp_ext",
    ),
    # Chinese
    **dict.fromkeys(
        [
            "gb2312", "gb_2312", "gb_2312-80", "csgb2312", "gbk", "x-gbk", "cp936", "ms936",
            "windows-936", "chinese", "euc-cn", "euccn", "iso-ir-58", "csiso58gb231280",
            "gb18030",
        ],
        "gb18030",
    ),
    **dict.fromkeys(
        [
            "big5", "big-5", "big-five", "bigfive", "cn-big5", "csbig5", "x-x-big5",
            "big5-hkscs", "big5hkscs", "cp950", "ms950", "windows-950",
        ],
        "big5hkscs",
    ),
    **dict.fromkeys(["euc-tw", "euc_tw", "x-euc-tw", "euctw", "cns11643"], "euc_tw"),
    "hz-gb-2312": "hz",
    # Korean
    **dict.fromkeys(
        [
            "euc-kr", "euc_kr", "euckr", "cseuckr", "ks_c_5601", "ks_c_5601-1987",
            "ks_c_5601-1989", "ksc5601", "ksc_5601", "korean", "iso-ir-149", "csksc56011987",
            "windows-949", "cp949", "ms949", "uhc", "x-windows-949",
        ],
        "cp949",
    ),
    "iso-2022-kr": "iso2022_kr",
    # Western: browsers decode all of these as windows-1252
    **dict.fromkeys(
        [
            "iso-8859-1", "iso8859-1", "iso_8859-1", "iso_8859-1:1987", "latin1", "latin-1",
            "l1", "cp819", "ibm819", "csisolatin1", "iso-ir-100", "us-ascii", "ascii",
            "ansi_x3.4-1968", "windows-1252", "cp1252", "x-cp1252",
        ],
        "cp1252",
    ),
    **dict.fromkeys(["iso-8859-9", "latin5", "l5", "windows-1254", "cp1254"], "cp1254"),
    **dict.fromkeys(["tis-620", "iso-8859-11", "windows-874", "cp874"], "cp874"),
    # Unicode
    **dict.fromkeys(["utf-8", "utf8", "unicode-1-1-utf-8", "x-unicode20utf8"], "utf-8"),
    **dict.fromkeys(
        ["iso-8859-8-i", "iso-8859-8-e", "logical", "visual", "csiso88598i"], "iso8859_8"
    ),
}  # fmt: skip

# Labels that cannot describe an 8-bit file (a meta tag saying utf-16 in ASCII-compatible
# bytes is wrong by construction; browsers read such pages as UTF-8).
_WIDE = {
    "utf-16", "utf-16le", "utf-16be", "utf-32", "utf-32le", "utf-32be", "ucs-2", "unicode",
    "csunicode", "iso-10646-ucs-2",
}  # fmt: skip

# Where the superset still rejects the bytes (e.g. cp1252's five undefined bytes, which
# WHATWG maps to C1 controls as latin-1 does), the exact code page is tried next.
_FALLBACKS = {
    "cp1252": ["latin-1"],
    "big5hkscs": ["cp950"],
    "euc_jp": ["euc_jis_2004"],
    "cp932": ["shift_jis_2004"],
    "iso2022_jp_ext": ["iso2022_jp_2"],
}

# charset-normalizer's and Python's names of encodings → the superset to decode with.
_WIDEN = {
    "shift_jis": "cp932", "shift_jis_2004": "cp932", "shift_jisx0213": "cp932",
    "gb2312": "gb18030", "gbk": "gb18030", "euc_kr": "cp949", "big5": "big5hkscs",
    "cp950": "big5hkscs", "euc_jis_2004": "euc_jp", "euc_jisx0213": "euc_jp",
    "latin_1": "cp1252", "iso8859_1": "cp1252", "ascii": "utf-8",
}  # fmt: skip

# A guess below this plausibility is refused: the file fails as not_a_text_document instead
# of being indexed as mojibake (the corpus files that need guessing score 0.99 or more).
MIN_PLAUSIBILITY = 0.8

# Near-ties go to the code pages documents actually use (windows-1252 first, as browsers
# assume), not to hp_roman8 or mac_iceland.
_POPULAR = {
    "cp1252": 0.03,
    **dict.fromkeys(
        [
            "cp1250", "cp1251", "cp1253", "cp1254", "cp1255", "cp1256", "cp1257", "koi8_r",
            "koi8_u", "iso8859_2", "iso8859_5", "iso8859_7", "iso8859_8", "iso8859_15",
            "cp932", "euc_jp", "gb18030", "big5hkscs", "cp949", "cp866",
        ],
        0.015,
    ),
}  # fmt: skip

# Code pages always considered when guessing, after charset-normalizer's own candidates.
_CANDIDATES = [
    "cp932", "euc_jp", "gb18030", "big5hkscs", "cp949", "euc_tw",
    "cp1252", "cp1250", "cp1251", "cp1253", "cp1254", "cp1255", "cp1256", "cp1257",
    "koi8_r", "koi8_u", "iso8859_15", "iso8859_2", "iso8859_5", "iso8859_7", "iso8859_8",
    "cp866",
]  # fmt: skip


def codec_for_label(label: str) -> str | None:
    """The Python codec for a declared encoding label; None if unknown or unusable."""
    label = label.strip().strip("\"'").lower()
    if not label or label in _WIDE:
        return None
    if label in _ALIASES:
        return _ALIASES[label]
    try:
        name = codecs.lookup(label).name
    except LookupError:
        return None
    return _ALIASES.get(name.replace("_", "-"), _ALIASES.get(name, name))


# -- declarations and content sniffing --------------------------------------------------------

_XML_DECL = re.compile(rb"""^\s*<\?xml\s[^>]*?encoding\s*=\s*["']\s*([A-Za-z0-9._:-]+)""", re.I)
_META_CHARSET = re.compile(
    rb"""<meta\s[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.I | re.S
)
_HEAD_WINDOW = 8192


def declared_encoding(data: bytes) -> tuple[str | None, str | None]:
    """(label, where) that the file declares in its first 8 KiB; where is "xml" or "meta"."""
    head = data[:_HEAD_WINDOW]
    match = _XML_DECL.match(head)
    if match:
        return match.group(1).decode("ascii"), "xml"
    match = _META_CHARSET.search(head)
    if match:
        return match.group(1).decode("ascii"), "meta"
    return None, None


_LEADING_JUNK = re.compile(rb"^(?:\s|<!--.*?-->)*", re.S)
_UNICODE_BOMS = (
    codecs.BOM_UTF8,
    codecs.BOM_UTF32_LE,
    codecs.BOM_UTF32_BE,
    codecs.BOM_UTF16_LE,
    codecs.BOM_UTF16_BE,
)


def sniff_markup(data: bytes) -> str | None:
    """ "html", "xml" or None, from the bytes only (never the file name)."""
    head = data[:4096]
    for bom in _UNICODE_BOMS:
        if head.startswith(bom):
            head = head[len(bom) :]
            break
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


# -- how much a decoding looks like language --------------------------------------------------

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
# Typographic characters that are normal between words; the first few also inside words.
_INWORD_OK = set("\u2019\u2018\u00b7\u00ad")  # ’ ‘ · soft hyphen
_PUNCT_OK = set("«»“”„‚–—…•€£§°©®™±×÷½¼¾¡¿\u00a0‹›′″") | _INWORD_OK
_CJK_PREFIXES = (
    "CJK", "HIRAGANA", "KATAKANA", "HANGUL", "HALFWIDTH", "FULLWIDTH", "IDEOGRAPHIC",
    "BOPOMOFO", "KANGXI",
)  # fmt: skip
_BICAMERAL = {"LATIN", "CYRILLIC", "GREEK", "ARMENIAN", "GEORGIAN"}
# Traditional forms of the simplified characters among charset-normalizer's most frequent
# Chinese ones, so that Big5 and EUC-TW text scores like GB text.
_TRADITIONAL_FREQUENT = "這個們來為國說時會對於著過發後裡裏種經麼學現當沒動還進樣開從實"


def _script(ch: str) -> str:
    if ch.isascii():
        return "LATIN" if ch.isalpha() else "ASCII"
    try:
        name = unicodedata.name(ch)
    except ValueError:
        return "?"
    if name.startswith(_CJK_PREFIXES):
        return "CJK"
    return name.split(" ", 1)[0]


@cache
def _frequent_cjk() -> frozenset[str]:
    from charset_normalizer.constant import FREQUENCIES

    return frozenset([*FREQUENCIES["Chinese"], *FREQUENCIES["Japanese"], *_TRADITIONAL_FREQUENT])


@lru_cache(maxsize=65536)
def _common_cjk(ch: str) -> bool:
    """Kana, one of the 2,350 Hangul syllables of KS X 1001, or a frequent hanzi/kanji."""
    if "\u3041" <= ch <= "\u30fa" or ch == "\u30fc":
        return True
    if "\uac00" <= ch <= "\ud7af":
        try:  # Python's euc_kr writes the other syllables as 8-byte make-up sequences
            return len(ch.encode("euc_kr")) == 2
        except UnicodeEncodeError:
            return False
    return ch in _frequent_cjk()


def _cjk_hit_share(letters: list[str]) -> float:
    """Share of CJK letters that are common (see `_common_cjk`).

    The frequency list, not the code range, tells a wrong CJK codec: EUC-TW read as GB18030
    lands in GB 2312's level-1 range like real text does, but few of its characters are
    frequent ones. Halfwidth katakana and Hangul compatibility jamo do not count: they are
    what text in another encoding becomes when read as cp932 or cp949. Hangul text with 20-80%
    hanja is Chinese read as cp949, not Korean.
    """
    hangul = sum(1 for c in letters if "\uac00" <= c <= "\ud7af")
    han = sum(1 for c in letters if "\u4e00" <= c <= "\u9fff")
    if hangul and 0.2 <= han / (hangul + han) <= 0.8:
        return 0.0
    return sum(1 for c in letters if _common_cjk(c)) / len(letters)


@lru_cache(maxsize=64)
def _top_letters(script: str) -> tuple[frozenset[str], ...]:
    """The 13 most frequent letters of each language written in `script`."""
    from charset_normalizer.constant import FREQUENCIES

    return tuple(
        frozenset(letters[:13])
        for letters in FREQUENCIES.values()
        if letters and _script(letters[0]) == script and len(letters) >= 20
    )


def coherence(text: str, sample: int = 20000) -> float:
    """0..1: do the letters of the text's main non-Latin script follow a real language?

    CJK: the share of common characters, mapped from 0.1..0.3 to 0..1. Alphabets (Cyrillic,
    Greek, Hebrew, Arabic, ...): the share of letters among one language's 13 most frequent
    ones, mapped from 0.4..0.7 to 0..1, lowered when most letters are upper case (KOI8-R read
    as cp1251 swaps the cases). Latin text, or fewer than 5 such letters: 1.
    """
    by_script: dict[str, list[str]] = {}
    for c in text[:sample]:
        if c.isalpha() and not c.isascii():
            by_script.setdefault(_script(c), []).append(c)
    if not by_script:
        return 1.0
    script = max(by_script, key=lambda k: len(by_script[k]))
    mine = by_script[script]
    if script == "LATIN":
        return 1.0
    if script == "CJK":
        return min(1.0, max(0.0, (_cjk_hit_share(mine) - 0.1) / 0.2)) if len(mine) >= 2 else 1.0
    tops = _top_letters(script)
    if len(mine) < 5 or not tops:
        return 1.0
    lowered = [c.lower() for c in mine]
    share = max(sum(c in top for c in lowered) / len(lowered) for top in tops)
    score = min(1.0, max(0.0, (share - 0.4) / 0.3))
    if script in _BICAMERAL and len(mine) >= 10:
        upper = sum(1 for c in mine if c.isupper()) / len(mine)
        if upper > 0.6:
            score *= 1.0 - 0.5 * (upper - 0.6) / 0.4
    return score


def plausibility(text: str, sample: int = 20000) -> float:
    """How much `text` looks like natural language: 1 is clean, 0 is garbage.

    Only non-ASCII characters are judged (text without any scores 1):
    - good: letters of the text's dominant script; Latin letters that one language uses
      together (French àéç, Czech čřů; a Czech text read as cp1252 gives øèù, which no
      language combines); typographic punctuation between words; CJK punctuation.
    - bad: C1 controls, U+FFFD and private-use characters; a symbol inside a word; a combining
      accent after a Latin letter; an upper-case letter right after a lower-case one inside a
      word; a letter next to a letter of another script; letters of a non-dominant script;
      Latin letters outside the best-fitting language; CJK text of rare characters.
    """
    text = text[:sample]
    good = bad = 0
    latin_letters: dict[str, int] = {}
    scripts: dict[str, int] = {}
    n = len(text)
    for i, ch in enumerate(text):
        if ch.isascii():
            continue
        o = ord(ch)
        if 0x80 <= o <= 0x9F or ch == "\ufffd" or 0xE000 <= o <= 0xF8FF:
            bad += 3
            continue
        prev_ch = text[i - 1] if i else " "
        next_ch = text[i + 1] if i + 1 < n else " "
        cat = unicodedata.category(ch)
        if cat[0] == "L":
            script = _script(ch)
            scripts[script] = scripts.get(script, 0) + 1
            if script == "LATIN":
                latin_letters[ch.lower()] = latin_letters.get(ch.lower(), 0) + 1
            if script in _BICAMERAL and ch.isupper() and prev_ch.isalpha() and prev_ch.islower():
                bad += 1
            if script == "CJK":
                # CJK has no spaces, so a Latin word may touch it; a kanji inside a Latin word
                # (French read as Shift-JIS) may not
                if (
                    prev_ch.isascii()
                    and prev_ch.isalpha()
                    and next_ch.isascii()
                    and next_ch.isalpha()
                ):
                    bad += 2
            else:
                if prev_ch.isalpha() and _script(prev_ch) not in (script, "CJK"):
                    bad += 1
                if next_ch.isalpha() and _script(next_ch) not in (script, "CJK"):
                    bad += 1
            continue
        glued = (
            prev_ch.isalpha()
            and next_ch.isalpha()
            and _script(prev_ch) in _BICAMERAL
            and _script(next_ch) in _BICAMERAL
        )
        if cat in ("Mn", "Mc", "Me"):
            if prev_ch.isalpha() and _script(prev_ch) == "LATIN":
                bad += 2
            else:
                good += 1
        elif ch in _INWORD_OK:
            good += 1
        elif glued:
            bad += 2
        elif ch in _PUNCT_OK or cat == "Zs" or _script(ch) == "CJK":
            good += 1
        elif cat[0] in "SP" and o < 0x2000 and (prev_ch.isalpha() or next_ch.isalpha()):
            bad += 1  # a Latin-1 symbol stuck to a word
        elif (o < 0x2000 or 0x2500 <= o < 0x25A0) and (
            (not prev_ch.isascii() and not prev_ch.isalpha() and not prev_ch.isspace())
            or (not next_ch.isascii() and not next_ch.isalpha() and not next_ch.isspace())
        ):
            # runs of Latin-1 symbols or box drawing, which is what code-page mojibake is made
            # of; CJK pages' ■◆★※ are left alone
            bad += 1
    if scripts:
        dominant = max(scripts, key=lambda k: scripts[k])
        cjk = [c for c in text if c.isalpha() and not c.isascii() and _script(c) == "CJK"]
        cjk_ok = len(cjk) < 20 or _cjk_hit_share(cjk) >= 0.12
        for script, count in scripts.items():
            if script == "LATIN":
                continue
            if script == "CJK":
                if cjk_ok:
                    good += count
                else:
                    bad += count
            elif script == dominant:
                good += count
            else:
                bad += count
        if latin_letters:
            total = sum(latin_letters.values())
            best = max(
                sum(n for letter, n in latin_letters.items() if letter in letters)
                for letters in _COMMON_LATIN.values()
            )
            good += best
            bad += total - best
    judged = good + bad
    return 1.0 if judged == 0 else max(0.0, (good - bad) / judged)


# -- decoding ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decoded:
    """A text file's text and how it was decoded."""

    text: str
    encoding: str  # the Python codec that produced `text`
    how: str  # bom | wide | escape | declared-xml | declared-meta | utf-8 | guessed
    declared: str | None = None  # the label the file declared, if any
    markup: str | None = None  # "html", "xml" or None, sniffed from the content


_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_ESCAPES = (
    (b"\x1b$B", "iso2022_jp_ext"),
    (b"\x1b$@", "iso2022_jp_ext"),
    (b"\x1b$(D", "iso2022_jp_2"),
    (b"\x1b$)C", "iso2022_kr"),
)


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


def _decode_strictly(data: bytes, codec: str) -> tuple[str, str] | None:
    """(text, codec used) with `codec` or its fallbacks; None when none fits the bytes."""
    for name in [codec, *_FALLBACKS.get(codec, [])]:
        try:
            return data.decode(name), name
        except (UnicodeDecodeError, LookupError):
            continue
    return None


def _utf8_with_non_ascii(data: bytes) -> bool:
    if data.isascii():
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def guess(data: bytes) -> tuple[str, str]:
    """(text, codec) for undeclared, non-UTF bytes: the most plausible strict decoding."""
    import charset_normalizer

    ordered: list[str] = []
    results = charset_normalizer.from_bytes(data)
    for match in results:
        codec = _WIDEN.get(match.encoding, match.encoding)
        if codec not in ordered:
            ordered.append(codec)
    ordered += [codec for codec in _CANDIDATES if codec not in ordered]
    best: tuple[float, str, str] | None = None
    for rank, codec in enumerate(ordered):
        decoded = _decode_strictly(data, codec)
        if decoded is None:
            continue
        text, name = decoded
        score = plausibility(text)
        if score < MIN_PLAUSIBILITY:
            continue
        score += 0.25 * coherence(text)
        # then charset-normalizer's own candidates before the fixed list
        score += _POPULAR.get(name, 0.0) + (0.005 if rank < len(results) else 0.0)
        if best is None or score > best[0] + 1e-9:
            best = (score, text, name)
    if best is None:
        raise LoadError(Reason.NOT_A_TEXT_DOCUMENT, "no text encoding fits the file's bytes")
    return best[1], best[2]


def decode_bytes(data: bytes) -> Decoded:
    """Decode a text file's bytes (the module docstring gives the order of evidence)."""
    markup = sniff_markup(data)
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return Decoded(data.decode(codec), codec, "bom", markup=markup)
    wide = _wide_encoding_without_bom(data[:4096])
    if wide:
        decoded = _decode_strictly(data, wide)
        if decoded is not None:
            return Decoded(decoded[0], wide, "wide", markup=markup)
    if data.isascii() and b"\x1b" in data:
        for marker, codec in _ESCAPES:
            decoded = _decode_strictly(data, codec) if marker in data else None
            if decoded is not None:
                return Decoded(decoded[0], codec, "escape", markup=markup)
    label, where = declared_encoding(data)
    declared = codec_for_label(label) if label else None
    if declared:
        stateful = declared in ("iso2022_jp_ext", "iso2022_kr")
        if declared != "utf-8" and not stateful and _utf8_with_non_ascii(data):
            return Decoded(data.decode("utf-8"), "utf-8", "utf-8", label, markup)
        decoded = _decode_strictly(data, declared)
        if decoded is not None:
            return Decoded(decoded[0], decoded[1], f"declared-{where}", label, markup)
    try:
        return Decoded(data.decode("utf-8"), "utf-8", "utf-8", label, markup)
    except UnicodeDecodeError:
        pass
    text, codec = guess(data)
    return Decoded(text, codec, "guessed", label, markup)


def decode_text(data: bytes) -> str:
    """A text file's text; LoadError(not_a_text_document) when no encoding fits."""
    return decode_bytes(data).text


def looks_binary(text: str) -> bool:
    """True when decoded 'text' is mostly control characters: a binary file with a text name."""
    sample = text[:4096]
    if not sample:
        return False
    control = sum(1 for ch in sample if (ord(ch) < 32 and ch not in "\t\n\r\f") or ch == "\ufffd")
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
