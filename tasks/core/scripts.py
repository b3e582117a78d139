"""The writing systems (scripts) told apart, and the language group a text's script shows.

Scripts, by Unicode script property (letters only: digits, punctuation, symbols and marks
do not count):

- `han`: Han characters (Chinese hanzi, Japanese kanji, Korean hanja);
- `kana`: Hiragana, Katakana and ー (the prolonged sound mark, which Unicode files under
  Common);
- `hangul`: Korean Hangul;
- `latin`, `cyrillic`: those alphabets;
- `other`: any other letter (Greek, Arabic, Hebrew, Devanagari, Thai, …).

A text's dominant script is the one with the most weight, a Han, kana or Hangul character
weighing WIDE_WEIGHT letters of the other scripts (one carries about what a short word of
several letters does: "Internet2是一个…" with 117 Latin letters beside 106 Han characters is
Chinese text); a tie goes to the first in the list above. Its language group, what
`python -m flows.query --stats` reports, follows:

- `chinese`: Han dominates and there is no kana;
- `japanese`: Han dominates and there is some kana (Japanese mixes kanji and kana; Chinese
  has no kana), or kana dominates;
- `korean`: Hangul dominates;
- `latin`: the Latin alphabet dominates (English and other Western languages, and code);
- `cyrillic`: the Cyrillic alphabet dominates (Russian, Ukrainian, …);
- `other`: another script dominates;
- `no_letters`: the text has no letters at all (numbers or symbols only).

Letters are counted through a table of every code point's script, built once from the
character classes below, so a chunk of a thousand characters takes microseconds.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Literal, get_args

import regex

if TYPE_CHECKING:
    import numpy as np

Script = Literal["han", "kana", "hangul", "latin", "cyrillic", "other"]
Group = Literal["chinese", "japanese", "korean", "latin", "cyrillic", "other", "no_letters"]

SCRIPTS: tuple[Script, ...] = get_args(Script)
GROUPS: tuple[Group, ...] = get_args(Group)
# The language (ISO 639-1) a text of a group is taken to be in where nothing else says: a
# question's words are looked up as it (tasks/search/question.py), a chunk whose document
# states no language counts as it (tasks/dataset/vocabulary.py). Latin script is English.
LANGUAGE_OF_GROUP: dict[str, str] = {
    "latin": "en",
    "chinese": "zh",
    "japanese": "ja",
    "korean": "ko",
}

# The letters of each script but `other`, as `regex` character classes.
HAN = r"\p{Han}"
KANA = r"\p{Hiragana}\p{Katakana}ー"
HANGUL = r"\p{Hangul}"
# Chinese, Japanese and Korean: the three scripts written without spaces between words.
CJK = HAN + KANA + HANGUL
# What is written among them: CJK punctuation (。、「」) and full-width forms (！（１ａ).
CJK_PUNCTUATION = r"\p{Block=CJK_Symbols_And_Punctuation}\p{Block=Halfwidth_And_Fullwidth_Forms}"
LETTERS: dict[Script, str] = {
    "han": HAN,
    "kana": KANA,
    "hangul": HANGUL,
    "latin": r"\p{Latin}",
    "cyrillic": r"\p{Cyrillic}",
    "other": rf"\p{{L}}--[{CJK}\p{{Latin}}\p{{Cyrillic}}]",
}
_GROUP_OF_SCRIPT: dict[Script, Group] = {
    "kana": "japanese",
    "hangul": "korean",
    "latin": "latin",
    "cyrillic": "cyrillic",
    "other": "other",
}
_LETTER_PLANES_END = 0x40000  # planes 4 to 16 hold no letters (unassigned, tags, private use)


@cache
def _script_table() -> np.ndarray:
    """Every code point's script as 1 + its index in SCRIPTS, or 0 for a non-letter."""
    import numpy as np  # here and below: a table's snippets (CJK) need no numpy

    table = np.zeros(0x110000, np.uint8)
    runs = regex.compile(
        "|".join(f"(?P<{script}>[{LETTERS[script]}]+)" for script in SCRIPTS), regex.VERSION1
    )
    every_code_point = "".join(map(chr, range(_LETTER_PLANES_END)))
    for run in runs.finditer(every_code_point):
        table[run.start() : run.end()] = 1 + SCRIPTS.index(run.lastgroup)
    return table


def script_counts(text: str) -> dict[Script, int]:
    """How many letters of `text` each script has (scripts without any are left out)."""
    import numpy as np

    code_points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
    counts = np.bincount(_script_table()[code_points], minlength=1 + len(SCRIPTS))
    return {script: int(n) for script, n in zip(SCRIPTS, counts[1:], strict=True) if n}


def dominant_script(text: str) -> Script | None:
    """The script with the most letters in `text` (None when it has no letters)."""
    return _dominant(script_counts(text))


def language_group(text: str) -> Group:
    """The language group of `text` by its dominant script (see the module doc)."""
    counts = script_counts(text)
    dominant = _dominant(counts)
    if dominant is None:
        return "no_letters"
    if dominant == "han":
        return "japanese" if "kana" in counts else "chinese"
    return _GROUP_OF_SCRIPT[dominant]


WIDE_WEIGHT = 3  # letters of an alphabet that one Han, kana or Hangul character weighs
_WIDE: frozenset[Script] = frozenset({"han", "kana", "hangul"})


def _dominant(counts: dict[Script, int]) -> Script | None:
    if not counts:
        return None

    def weight(script: Script) -> int:
        return counts.get(script, 0) * (WIDE_WEIGHT if script in _WIDE else 1)

    return max(SCRIPTS, key=weight)  # the first of a tie


_CJK_TEXT = regex.compile(f"[{CJK}{CJK_PUNCTUATION}]")


def is_cjk(char: str) -> bool:
    """Whether `char` is Chinese, Japanese or Korean text: a Han, kana or Hangul character, CJK
    punctuation or a full-width form (no space is needed between two such characters)."""
    return _CJK_TEXT.match(char) is not None


def script_of(char: str) -> Script | None:
    """The script of one character (None when it is not a letter)."""
    index = int(_script_table()[ord(char)])
    return SCRIPTS[index - 1] if index else None
