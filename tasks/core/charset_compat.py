"""Every place doc-indexer relies on charset-normalizer's internals, here and nowhere else.

tasks/parse/decode.py ranks the decodings of an undeclared file itself (`guess`), and for
that uses two functions of modules charset-normalizer does not export, and the spelling of
the encodings its public `from_bytes` reports. charset-normalizer is pinned to the minor
version these were checked on (pyproject.toml); tests/test_charset_compat.py fails when a
release changes one of them underneath:

- `charset_normalizer.md.mess_ratio(text, maximum_threshold)`: 0..1, how much a decoded
  text looks like mojibake (unlikely script mixes, runs of symbols, stray accents). Called
  with maximum_threshold=1.0 so that it measures the whole sample, instead of stopping early
  once past its default 0.2 (`mess`).
- `charset_normalizer.cd.coherence_ratio(text)`: the languages whose frequent letters the
  text uses, as [(language, ratio), ...] best first (`language_coherence`).
- `from_bytes(...).best().encoding` names an encoding in Python's `encodings` spelling
  (`utf_16_le`, `iso2022_jp`): decode.py matches its families by prefix (`WIDE_UTF`,
  `ISO_2022`).
"""

from __future__ import annotations

from charset_normalizer.cd import coherence_ratio
from charset_normalizer.md import mess_ratio

WIDE_UTF = ("utf_16", "utf_32")  # UTF-16 and UTF-32, either byte order
ISO_2022 = ("iso2022",)  # 7-bit encodings with escapes: iso2022_jp, iso2022_kr, ...


def mess(text: str) -> float:
    """0..1: how much `text` looks like a wrong decoding (0: not at all), over all of it."""
    return float(mess_ratio(text, maximum_threshold=1.0))


def language_coherence(text: str) -> float:
    """0..1: how well `text` matches the letter frequencies of its most likely language
    (0 where it matches none)."""
    languages = coherence_ratio(text)
    return float(languages[0][1]) if languages else 0.0
