# Over 300 lines: one analyser for every script, the same at index and at query time.
"""Text analysis for full-text search: the terms a text is indexed and searched by.

LanceDB's own FTS tokenizer splits at whitespace and punctuation only, so a run of Chinese
characters would be a single term and BM25 on Chinese text nearly blind. The language work
is done here instead, the same way at both ends:

- index time: `search_text(chunk text)` is stored in the chunks table's `search_text`
  column, whose FTS index splits at whitespace only (LanceDB's lowercasing, stemming, stop
  words and folding are off: they are done here);
- query time: `query_text(question)`, the same terms each once, is matched against it.

What text becomes:

- Han characters with no kana in their stretch (Chinese; kanji alone): dictionary words from
  jieba's segmentation (`rjieba`, the Rust port with the same dictionary, bundled).
- Japanese: a stretch of Han and kana (with ー, and the Japanese punctuation between its
  runs) that holds any kana, since Chinese has none, goes through Sudachi (`sudachipy`; the
  dictionary is a file in the `sudachidict-core` wheel, memory-mapped in about 0.1 s, nothing
  is downloaded) in split mode A, the shortest units (所有権 → 所有, 権), as each word's
  normalized form, so that inflections and spellings meet (住んで → 住む, サーバ → サーバー,
  おいしい → 美味しい); particles, auxiliaries, conjunctions and punctuation are dropped.
  The index (not a question with kana) also gets jieba's words of the stretch's kanji runs:
  kanji-only text (a keyword query such as 例外処理, a heading) cannot be told from Chinese
  and is cut by jieba, which cuts Japanese compounds its own way (処理 → 処, 理).
  A letter or digit just before a Japanese stretch (pipで, pip で) is read with it, so that
  what follows is seen as a particle.
- Korean Hangul runs: overlapping character pairs (학교에서 → 학교, 교에, 에서), as before;
  no morphological analyser (Kiwi was measured and left out, see below).
- Alphabetic and numeric words: case and accents folded (é → e, ß → ss, Latin letters
  only: kana and Hangul keep their marks), English stop words dropped, Snowball English
  stems of pure ASCII words. Numbers stay (1,000 → 1000).
- Code identifiers whole AND in parts: `HashMap` → hashmap, hash, map; `snake_case_name`
  → itself, snake, case, name; `std::io` → std::io, std, io; dotted numbers likewise
  (3.14 → 3.14, 3, 14). Hyphenated, slashed and other dotted words (covid-19, and/or)
  give their parts only.

Each dictionary loads on the first text that needs it: English, Chinese or Korean text never
imports Sudachi (its first use takes about 0.1 s), and `warm_up()` loads it only when asked.
Sudachi's tokenizers are per thread (one shared dictionary).

The choices were measured on the dev sets and, for Japanese and Korean, by
`python -m benchmarks.analysers` (benchmarks/RESULTS.md, "Full-text analysers"): Sudachi
with jieba's words of the kanji runs for Japanese; Korean stays on character pairs, which
a morphological analyser (Kiwi) barely beat, at seconds and hundreds of MB to load.
Any change to the terms changes the index vocabulary: bump VERSION, which is part of the
dataset fingerprint, so an index built by another version asks for --rebuild.
"""

from __future__ import annotations

import threading
import unicodedata
from collections.abc import Callable, Iterator
from functools import cache, lru_cache
from typing import Any

import regex

from tasks.core.scripts import CJK, HAN, HANGUL, KANA

VERSION = 2
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

_WORD_CHAR = rf"[\w--[{CJK}]]"  # letters, marks, digits, underscore
_JOINER = r"(?:::|[./\-])"  # inside one compound: std::io, a.b, x/y, covid-19
# What may sit between the Han and kana runs of one Japanese stretch (punctuation; a Chinese
# stretch, one without kana, is cut back into its Han runs).
_CJK_GAP = r"[、。・「」『』【】〈〉《》〔〕〜…‥]"
_TOKENS = regex.compile(
    rf"""
    (?P<cjk>[{HAN}{KANA}]++(?:{_CJK_GAP}++[{HAN}{KANA}]++)*+)
    | (?P<hangul>[{HANGUL}]++)
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


# --- Japanese: Sudachi ----------------------------------------------------------------------

JA_SPLIT_MODE = "A"  # Sudachi's shortest units: 所有権 → 所有, 権 (see the module docstring)
JA_FORM = "normalized"  # 住んで → 住む, サーバ → サーバー, 書き換え → 書き替える
# Particles, auxiliaries (ます, た, ない), conjunctions, punctuation and blanks are not terms.
JA_DROP_POS = frozenset({"助詞", "助動詞", "接続詞", "補助記号", "記号", "空白"})
# The index also holds jieba's words of a Japanese stretch's kanji runs, what a kanji-only
# query (not told from Chinese: jieba) is cut into; a question with kana has Sudachi's only.
JA_INDEX_JIEBA = True
_JA_FIELDS = {"pos", "normalized_form", "dictionary_form"}
_HAS_KANA = regex.compile(rf"[{KANA}]")
_HAN_RUN = regex.compile(rf"[{HAN}]+")
_JA_CHAR = regex.compile(rf"[{HAN}{KANA}]")
_sudachi_local = threading.local()
_sudachi_loading = threading.Lock()


@cache
def _sudachi_dictionary() -> Any:
    """Sudachi's core dictionary (sudachidict-core, a file in its wheel, memory-mapped)."""
    from sudachipy import Dictionary

    return Dictionary(dict="core")


def _sudachi(mode: str) -> Any:
    """This thread's Sudachi tokenizer in split `mode` (a tokenizer is not to be shared
    between threads; the dictionary is)."""
    tokenizers: dict[str, Any] = _sudachi_local.__dict__.setdefault("tokenizers", {})
    if mode not in tokenizers:
        with _sudachi_loading:
            dictionary = _sudachi_dictionary()
        make = getattr(dictionary, "tokenizer", None) or dictionary.create  # before 0.7: create
        tokenizers[mode] = make(mode, fields=_JA_FIELDS)
    return tokenizers[mode]


def _japanese(
    stretch: str,
    before: str = "",
    *,
    mode: str = JA_SPLIT_MODE,
    form: str = JA_FORM,
    drop: frozenset[str] = JA_DROP_POS,
) -> list[str]:
    """The words of a Japanese stretch (Han, kana and what lies between them), each in its
    `form`; `before` is the letter or digit the stretch is glued to (pipで), read with it
    so that the particle after it is seen as one, and not itself a term."""
    found: list[str] = []
    tokenizer = _sudachi(mode)
    for piece in _pieces(before + stretch):
        for morpheme in tokenizer.tokenize(piece):
            if morpheme.part_of_speech()[0] in drop or not _JA_CHAR.search(morpheme.surface()):
                continue
            if form == "normalized":
                found.append(morpheme.normalized_form())
            elif form == "dictionary":
                found.append(morpheme.dictionary_form())
            else:
                found.append(morpheme.surface())
    return found


_PIECE_CHARS = 2_000  # Sudachi refuses inputs over 49,149 bytes
_PIECE_CUT = regex.compile(r"[。、.!?\s]")


def _pieces(text: str) -> Iterator[str]:
    """`text` in pieces of at most _PIECE_CHARS, cut after punctuation or a space if one is
    in the second half of the piece."""
    while len(text) > _PIECE_CHARS:
        window = text[:_PIECE_CHARS]
        cuts = [m.end() for m in _PIECE_CUT.finditer(window, _PIECE_CHARS // 2)]
        cut = cuts[-1] if cuts else _PIECE_CHARS
        yield text[:cut]
        text = text[cut:]
    yield text


_GLUED = regex.compile(rf"[[\p{{L}}\p{{N}}]--[{CJK}]]", regex.VERSION1)
_CLOSING = frozenset(")]}\"'`’”」』")


def _pairs(run: str) -> list[str]:
    """Overlapping character pairs of a run; a single character stays itself."""
    return [run] if len(run) < 2 else [run[i : i + 2] for i in range(len(run) - 1)]


def terms(text: str, query: bool = False) -> list[str]:
    """The index terms of `text`, in order (repeats kept: they are term frequency); `query`:
    a question's, which leave out the jieba words of Japanese kanji (JA_INDEX_JIEBA)."""
    found: list[str] = []
    text = unicodedata.normalize("NFKC", _FRACTION.sub(" ", text))
    for match in _TOKENS.finditer(text):
        kind, run = match.lastgroup, match.group()
        if kind == "word":
            found.extend(_word_terms(run))
        elif kind == "cjk":
            japanese = _HAS_KANA.search(run) is not None
            if japanese:
                found.extend(_japanese(run, _glued(text, match.start())))
            if not japanese or (JA_INDEX_JIEBA and not query):
                for han in _HAN_RUN.findall(run):  # Chinese, kanji alone: jieba, run by run
                    found.extend(_segment()(han))
        elif kind == "hangul":
            found.extend(_pairs(run))
        else:  # number
            found.append(run.replace(",", ""))
    return [term for term in found if len(term) <= MAX_TERM_CHARS]


def _glued(text: str, start: int) -> str:
    """What a Japanese stretch starting at `start` is glued to, for Sudachi to read first: the
    letter or digit just before it (pipで, 8080で), also across spaces (Japanese puts them
    around Latin words), X after a closing quote or bracket, else nothing."""
    end = start
    while end and text[end - 1] in " \t":
        end -= 1
    if not end:
        return ""
    if _GLUED.match(text, end - 1):
        return text[end - 1]
    return "X" if text[end - 1] in _CLOSING else ""


# Words repeat: the terms of each distinct word are kept (a bounded cache, ~100 bytes an entry),
# which makes analysing English text several times faster.
WORD_CACHE_SIZE = 200_000


@lru_cache(maxsize=WORD_CACHE_SIZE)
def _word_terms(raw: str) -> tuple[str, ...]:
    """The terms of one word token (see `_compound`)."""
    found: list[str] = []
    _compound(raw, found)
    return tuple(found)


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


_CJK_CHAR = regex.compile(rf"[{CJK}]")
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
    return " ".join(dict.fromkeys(terms(question, query=True)))


def warm_up(japanese: bool = False) -> None:
    """Load jieba's dictionary and the stemmer now rather than on first use; Sudachi's
    dictionary (for this thread) too if asked, which a process that may never see Japanese
    text should not pay for."""
    _segment()("预热")
    _stem()("warming")
    if japanese:
        _sudachi(JA_SPLIT_MODE).tokenize("準備")
