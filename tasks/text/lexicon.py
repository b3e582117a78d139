"""The lexicon a question is translated with: English index terms ↔ another language's index
terms, made from a bilingual dictionary (tasks/text/dictionaries/) through the analyser of
tasks/text/analysis.py, so that both sides are what the full-text index holds.

From each dictionary entry, each English gloss ("to install (software)") becomes its analysed
terms ("instal"), after dropping what glosses carry besides the sense: parentheses, a
leading "to", "sth"/"sb", and cross-references ("see …", "variant of …", "CL:…"). A gloss
links each of its terms to each headword's terms with a strength: 1 / (the gloss's term
count), lowered for later senses (SENSE_DECAY), raised for entries the dictionary marks
common (COMMON_BOOST). The lexicon keeps the strongest link per pair, both ways:

- `targets(term)`: an English term → the other language's headwords (each as its index
  terms: 软件包 → ("软件包",), 依存関係 → ("依存", "関係")), strongest first;
- `glosses(term)`: a single-term headword of the other language → English terms.

Making a lexicon reads the whole dictionary (CC-CEDICT about 5 s, JMdict about 15 s here),
so it is made once per machine (`make install` runs `python -m tasks.text.lexicon`, else
the first question that needs it) into an SQLite file in the lexicon cache, and a question
looks up its few words there: opening the file costs a millisecond, nothing is loaded.
"""

from __future__ import annotations

import os
import re
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

from tasks.text import analysis
from tasks.text.dictionaries import Dictionary, Entry, dictionaries

VERSION = 1  # of the way entries become links; part of the file's name
CACHE_ENV = "DOC_INDEXER_LEXICON_CACHE"
SENSE_DECAY = 0.1  # the n-th gloss of an entry (0-based) weighs 1 / (1 + SENSE_DECAY·n)
COMMON_BOOST = 1.5  # an entry the dictionary marks as a common word
MAX_LINKS = 100  # per English term and per headword term: the strongest ones

# What a gloss carries besides its sense.
_ASIDE = re.compile(r"\([^)]*\)|\[[^\]]*\]|（[^）]*）")
_REFERENCE = re.compile(
    r"^(?:CL:|see |see also |variant of |old variant |also written |also pr\. |Taiwan pr\. "
    r"|surname |abbr\. |used in |erhua variant |\(?archaic\)?)",
    re.IGNORECASE,
)
_TO = re.compile(r"^to\s+", re.IGNORECASE)
_FILLERS = frozenset({"sth", "sb", "someone", "something", "oneself", "one's", "etc", "esp"})
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9'\-]*")


def gloss_terms(gloss: str) -> list[str]:
    """The English index terms of one gloss, each once ("to install (software)" → instal)."""
    text = _ASIDE.sub(" ", gloss).strip()
    if not text or _REFERENCE.match(text):
        return []
    words = [word for word in _WORD.findall(_TO.sub("", text)) if word.lower() not in _FILLERS]
    return list(dict.fromkeys(analysis.terms(" ".join(words))))


@dataclass(frozen=True)
class Link:
    """An English term and a headword (as its index terms) that translate each other."""

    english: str
    headword: tuple[str, ...]
    strength: float


def links(entry: Entry) -> Iterator[Link]:
    """The links of one dictionary entry (see the module doc)."""
    headwords = list(
        dict.fromkeys(tuple(analysis.terms(word, query=True)) for word in entry.headwords[:3])
    )
    headwords = [terms for terms in headwords if terms]
    boost = COMMON_BOOST if entry.common else 1.0
    for rank, gloss in enumerate(entry.glosses):
        terms = gloss_terms(gloss)
        if not terms:
            continue
        strength = boost / len(terms) / (1 + SENSE_DECAY * rank)
        for english in terms:
            for headword in headwords:
                yield Link(english, headword, strength)


def cache_dir() -> Path:
    """Where lexicon files live: $DOC_INDEXER_LEXICON_CACHE, else the project's .cache/lexicons."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[2] / ".cache" / "lexicons"


def lexicon_file(dictionary: Dictionary) -> Path:
    """The file of a dictionary's lexicon: named after what decides its content (this code's
    and the analyser's versions, the data's package version)."""
    data = version(dictionary.distribution)
    name = f"{dictionary.language}-{dictionary.distribution}-{data}-l{VERSION}-a{analysis.VERSION}"
    return cache_dir() / f"{name}.sqlite"


_SCHEMA = """
CREATE TABLE targets (english TEXT, headword TEXT, strength REAL);
CREATE TABLE glosses (headword TEXT, english TEXT, strength REAL);
"""
_INDEXES = """
CREATE INDEX targets_by_english ON targets (english);
CREATE INDEX glosses_by_headword ON glosses (headword);
"""


def make(dictionary: Dictionary) -> Path:
    """Write the dictionary's lexicon file (atomically: a reader never sees half of one)."""
    forward: dict[str, dict[tuple[str, ...], float]] = {}
    backward: dict[str, dict[str, float]] = {}
    for entry in dictionary.entries():
        for link in links(entry):
            found = forward.setdefault(link.english, {})
            found[link.headword] = max(found.get(link.headword, 0.0), link.strength)
            if len(link.headword) == 1:
                back = backward.setdefault(link.headword[0], {})
                back[link.english] = max(back.get(link.english, 0.0), link.strength)
    target = lexicon_file(dictionary)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}")
    partial.unlink(missing_ok=True)
    with sqlite3.connect(partial) as db:
        db.executescript(_SCHEMA)
        db.executemany(
            "INSERT INTO targets VALUES (?, ?, ?)",
            (
                (english, " ".join(headword), strength)
                for english, found in forward.items()
                for headword, strength in _strongest(found)
            ),
        )
        db.executemany(
            "INSERT INTO glosses VALUES (?, ?, ?)",
            (
                (headword, english, strength)
                for headword, found in backward.items()
                for english, strength in _strongest(found)
            ),
        )
        db.executescript(_INDEXES)
    db.close()
    os.replace(partial, target)
    return target


def _strongest(found: dict[Any, float]) -> list[tuple[Any, float]]:
    return sorted(found.items(), key=lambda item: -item[1])[:MAX_LINKS]


class Lexicon:
    """English ↔ one language, read from its lexicon file (a connection per thread)."""

    def __init__(self, language: str, file: Path):
        self.language, self.file = language, file
        self._local = threading.local()

    def _db(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = sqlite3.connect(f"file:{self.file}?mode=ro", uri=True)
        return db

    def targets(self, english: str) -> list[tuple[tuple[str, ...], float]]:
        """The headwords (as index terms) that translate an English index term, strongest first."""
        rows = self._db().execute(
            "SELECT headword, strength FROM targets WHERE english = ? ORDER BY strength DESC",
            (english,),
        )
        return [(tuple(headword.split(" ")), strength) for headword, strength in rows]

    def glosses(self, term: str) -> list[tuple[str, float]]:
        """The English index terms that translate a headword's index term, strongest first."""
        rows = self._db().execute(
            "SELECT english, strength FROM glosses WHERE headword = ? ORDER BY strength DESC",
            (term,),
        )
        return list(rows)


_making = threading.Lock()


@cache
def lexicon(language: str) -> Lexicon | None:
    """The lexicon between English and `language`, once per process; made now where this
    machine has none yet. None where no dictionary for the language is registered or its
    package is not installed."""
    dictionary = dictionaries().get(language)
    if dictionary is None:
        return None
    try:
        file = lexicon_file(dictionary)
    except ImportError:
        return None
    with _making:
        if not file.is_file():
            make(dictionary)
    return Lexicon(language, file)


def languages() -> frozenset[str]:
    """The languages a lexicon with English can be had for here."""
    return frozenset(dictionaries())


def main() -> int:
    """Make every registered dictionary's lexicon file that this machine lacks."""
    for language, dictionary in sorted(dictionaries().items()):
        file = lexicon_file(dictionary)
        if file.is_file():
            print(f"{dictionary.name} ({language}): already made: {file}")
            continue
        started = time.perf_counter()
        make(dictionary)
        took = time.perf_counter() - started
        print(f"{dictionary.name} ({language}): made in {took:.1f} s: {file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
