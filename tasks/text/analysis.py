"""Text analysis for full-text search: the terms a text is indexed and searched by.

LanceDB's own FTS tokenizer splits at whitespace and punctuation only, so a run of Chinese
characters would be a single term and BM25 on Chinese text nearly blind. The language work
is done here instead, the same way at both ends:

- index time: `search_text(chunk text)` is stored in the chunks table's `search_text`
  column, whose FTS index splits at whitespace only (LanceDB's lowercasing, stemming, stop
  words and folding are off: they are done here);
- query time: `query_text(question)`, the same terms each once, is matched against it.

What text becomes:

- Han characters (Chinese; Japanese kanji): dictionary words from jieba's segmentation
  (`rjieba`, the Rust port with the same dictionary, bundled, loaded on first use).
- Japanese kana and Korean Hangul runs: overlapping character pairs (no segmenter here).
- Alphabetic and numeric words: case and accents folded (é → e, ß → ss, Latin letters
  only: kana and Hangul keep their marks), English stop words dropped, Snowball English
  stems of pure ASCII words. Numbers stay (1,000 → 1000).
- Code identifiers whole AND in parts: `HashMap` → hashmap, hash, map; `snake_case_name`
  → itself, snake, case, name; `std::io` → std::io, std, io; dotted numbers likewise
  (3.14 → 3.14, 3, 14). Hyphenated, slashed and other dotted words (covid-19, and/or)
  give their parts only.

The choices were measured on the dev sets (README.md, "Search quality"). Any change to the
terms changes the index vocabulary: bump VERSION, which is part of the dataset fingerprint,
so an index built by another version asks for --rebuild.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from functools import cache, lru_cache

import regex

VERSION = 1
NAME = f"words-cjk-stemmed-v{VERSION}"  # recorded in the dataset fingerprint
MAX_TERM_CHARS = 64  # longer terms (hashes, base64) are dropped; their parts still count

# NLTK's English stop words, the list LanceDB's default tokenizer uses; removed before
# stemming (LanceDB removes them after, so "only", "very", "why" slip through there).
ENGLISH_STOP_WORDS = frozenset(
    """
    a about above after again against ain all am an and any are aren as at be because
    been before being below between both but by can couldn d did didn do does doesn doing
    don down during each few for from further had hadn has hasn have haven having he her
    here hers herself him himself his how i if in into is isn it its itself just ll m ma
    me mightn more most mustn my myself needn no nor not now o of off on once only or other
    our ours ourselves out over own re s same shan she should shouldn so some such t than
    that the their theirs them themselves then there these they this those through to too
    under until up ve very was wasn we were weren what when where which while who whom why
    will with won wouldn y you your yours yourself yourselves
    """.split()
)

_HAN = r"\p{Han}"
_KANA = r"\p{Hiragana}\p{Katakana}ー"  # ー, the prolonged sound mark, belongs to kana words
_HANGUL = r"\p{Hangul}"
_WORD_CHAR = rf"[\w--[{_HAN}{_KANA}{_HANGUL}]]"  # letters, marks, digits, underscore
_JOINER = r"(?:::|[./\-])"  # inside one compound: std::io, a.b, x/y, covid-19
_TOKENS = regex.compile(
    rf"""
    (?P<han>[{_HAN}]+)
    | (?P<kana>[{_KANA}]+)
    | (?P<hangul>[{_HANGUL}]+)
    | (?P<number>(?<![\w.,])\d{{1,3}}(?:,\d{{3}})+(?![\w,]|\.\d))   # 1,234,567
    | (?P<word>{_WORD_CHAR}++(?:{_JOINER}{_WORD_CHAR}++)*+(?:(?:\+\+|\#)(?![\w+\#]))?)
    """,
    regex.VERSION1 | regex.VERBOSE,
)
_JOINERS = regex.compile(_JOINER)
_CODE_LIKE = regex.compile(r"_|::|^\d+(?:\.\d+)+$")  # compounds also kept whole
# Where an identifier splits into words: hashMap, XMLHttp, base64Encode (but p53, x86 stay).
_CAMEL = regex.compile(
    r"(?<=\p{Ll})(?=\p{Lu})|(?<=\p{Lu})(?=\p{Lu}\p{Ll}{2})|(?<=\p{N})(?=\p{Lu}\p{Ll})",
    regex.VERSION1,
)
_FRACTION = regex.compile(r"(?<=\d)(?=[\u00BC-\u00BE\u2150-\u215E])")  # 6½ → 6 ½, not 61⁄2
# Letters that NFKD does not take apart but ASCII folding conventionally maps.
_SPECIAL_FOLDS = {
    **{"ß": "ss", "æ": "ae", "œ": "oe", "ø": "o", "ð": "d", "þ": "th", "ł": "l"},
    **{"đ": "d", "ħ": "h", "ı": "i", "ŀ": "l", "ŋ": "n", "ſ": "s"},
}


class _LatinFold(dict[int, str]):
    """A str.translate table, filled on demand: a Latin letter with diacritics → its ASCII
    base, a loose combining mark → nothing, anything else → itself."""

    def __missing__(self, code: int) -> str:
        char = chr(code)
        if "\u0300" <= char <= "\u036f":
            folded = ""
        else:
            decomposed = unicodedata.normalize("NFKD", char)
            base = "".join(c for c in decomposed if not unicodedata.combining(c))
            folded = base if base.isascii() and base.isalnum() else _SPECIAL_FOLDS.get(char, char)
        self[code] = folded
        return folded


_FOLD = _LatinFold()


def fold(word: str) -> str:
    """'Crème' → 'creme', 'Straße' → 'strasse'; kana and Hangul keep their marks."""
    word = word.casefold()
    return word if word.isascii() else word.translate(_FOLD)


@cache
def _segment() -> Callable[[str], list[str]]:
    """jieba's word segmentation (rjieba); its dictionary loads on the first Chinese text."""
    import rjieba

    cut: Callable[[str], list[str]] = rjieba.cut
    return cut


@cache
def _stem() -> Callable[[str], str]:
    """Snowball English (Porter2) from PyStemmer, with a cache of the words seen."""
    import Stemmer

    return lru_cache(maxsize=200_000)(Stemmer.Stemmer("english").stemWord)


def _pairs(run: str) -> list[str]:
    """Overlapping character pairs of a run; a single character stays itself."""
    return [run] if len(run) < 2 else [run[i : i + 2] for i in range(len(run) - 1)]


def terms(text: str) -> list[str]:
    """The index terms of `text`, in order (repeats kept: they are term frequency)."""
    found: list[str] = []
    text = unicodedata.normalize("NFKC", _FRACTION.sub(" ", text))
    for match in _TOKENS.finditer(text):
        kind, run = match.lastgroup, match.group()
        if kind == "word":
            _compound(run, found)
        elif kind == "han":
            found.extend(_segment()(run))
        elif kind == "number":
            found.append(run.replace(",", ""))
        else:  # kana, hangul
            found.extend(_pairs(run))
    return [term for term in found if len(term) <= MAX_TERM_CHARS]


def _compound(raw: str, found: list[str]) -> None:
    """A word, identifier or joined compound: code-like wholes, then the parts."""
    if raw.endswith(("++", "#")):  # c++, c#, f#: the whole keeps its suffix
        found.append(fold(raw))
        _compound(raw.rstrip("+#"), found)
        return
    pieces = [
        piece
        for segment in _JOINERS.split(raw)
        for piece in segment.split("_")
        if any(c.isalnum() for c in piece)
    ]
    if len(pieces) > 1 and _CODE_LIKE.search(raw):
        found.append(fold(raw))
    for piece in pieces:
        parts = _CAMEL.split(piece)
        if len(parts) > 1:
            _word(piece, found, drop_stop_words=False)  # HashMaps → hashmap
        for part in parts:
            _word(part, found)


def _word(word: str, found: list[str], drop_stop_words: bool = True) -> None:
    word = fold(word)
    if drop_stop_words and word in ENGLISH_STOP_WORDS:
        return
    found.append(_stem()(word) if word.isascii() and word.isalpha() else word)


_CJK_CHAR = regex.compile(rf"[{_HAN}{_KANA}{_HANGUL}]")
_LETTER = regex.compile(r"\p{L}")


def mostly_cjk(text: str) -> bool:
    """Whether at least half of the letters of `text` are Han, kana or Hangul."""
    letters = len(_LETTER.findall(text))
    return letters > 0 and 2 * len(_CJK_CHAR.findall(text)) >= letters


def search_text(text: str) -> str:
    """The value of the `search_text` column: the terms of `text`, joined by spaces."""
    return " ".join(terms(text))


def query_text(question: str) -> str:
    """What a question is matched with: its terms, each once (a repeated term would count
    twice in the BM25 sum)."""
    return " ".join(dict.fromkeys(terms(question)))


def warm_up() -> None:
    """Load the segmenter's dictionary and the stemmer now rather than on first use."""
    _segment()("预热")
    _stem()("warming")
