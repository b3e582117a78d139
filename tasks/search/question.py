"""A question analysed once: its script, its language, its full-text terms, and its words in
the dataset's other languages. Every list and the fusion read this (tasks/search/ranking.py,
tasks/search/fusion.py), none analyses the text again.

**Translations.** For each language the dataset holds (tasks/dataset/vocabulary.py) that
the question is not written in, its words are looked up in the bilingual lexicon between
English and that language (tasks/text/lexicon.py, made from a dictionary in a wheel):
English words to Chinese or Japanese headwords, and Chinese or Japanese words to English.
Of a word's translations only those the dataset's chunks hold are kept, the TRANSLATIONS
strongest by the lexicon's strength, and they share the word's weight of 1 in proportion to
their strength (a headword of several terms splits its share among them), so that a word
with many translations counts no more than one with a single one. An English word the
lexicon cannot translate, or one that looks like code (an identifier, a path, a version),
stays as it is where the dataset holds it: documentation in any language writes `dh_make`
and `debian/rules` in Latin letters. The translated terms are searched as a list of their own
(hybrid mode's third list). Korean has no lexicon here; its questions and documents meet
through the vectors and the Latin words they share.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import regex

from tasks.core.scripts import LANGUAGE_OF_GROUP, Group, language_group
from tasks.dataset.vocabulary import Vocabulary
from tasks.text import analysis
from tasks.text.lexicon import Lexicon, lexicon

ENGLISH = "en"
TRANSLATIONS = 3  # the translations kept per word: the strongest the dataset holds
CANDIDATES = 30  # the lexicon's strongest translations of a word checked against the dataset
# An English term that stays as it is beside its translations: an identifier, path or number.
_CODE_LIKE = regex.compile(r"[_./:#+\d]")


@dataclass(frozen=True)
class Question:
    """One question as every list and the fusion read it."""

    text: str
    group: Group  # the language group of its script (tasks/core/scripts.py)
    cjk: bool  # at least half of its letters are Han, kana or Hangul
    language: str | None  # what its words are looked up as: "en", "zh", "ja", "ko"; None: other
    terms: tuple[str, ...]  # its full-text terms, each once
    # its words in the dataset's other languages: index term → weight (empty: none)
    translations: Mapping[str, float] = field(default_factory=dict)
    # the dataset holds no documents in its language (known only with a vocabulary): its own
    # words can meet only the identifiers and loan words the documents share with it
    across: bool = False

    @property
    def weighted_terms(self) -> dict[str, float]:
        """Its own terms as a full-text query: each weighing one."""
        return dict.fromkeys(self.terms, 1.0)


def ask(text: str, vocabulary: Vocabulary | None = None) -> Question:
    """`text` analysed, and translated into the languages `vocabulary` says the dataset holds
    (none without one)."""
    group = language_group(text)
    language = LANGUAGE_OF_GROUP.get(group)
    terms = tuple(analysis.query_text(text).split())
    translations: dict[str, float] = {}
    if vocabulary is not None and language is not None:
        for held in sorted(vocabulary.languages - {language}):
            _add(translations, translate(terms, language, held, vocabulary))
    across = (
        vocabulary is not None
        and bool(vocabulary.languages)
        and (language not in vocabulary.languages)
    )
    cjk = analysis.mostly_cjk(text)
    return Question(text, group, cjk, language, terms, translations, across)


def translate(
    terms: tuple[str, ...], language: str, into: str, vocabulary: Vocabulary
) -> dict[str, float]:
    """A question's `terms` (in `language`) as weighted terms in `into`, through the lexicon
    between English and the other one (see the module doc); empty where there is none."""
    other = into if language == ENGLISH else language if into == ENGLISH else None
    words_of = lexicon(other) if other is not None else None
    if words_of is None:
        return {}
    lookups = {term: _candidates(words_of, term, language) for term in terms}
    held = vocabulary.chunks_holding(
        [*terms, *(word for found in lookups.values() for words, _ in found for word in words)]
    )
    weighted: dict[str, float] = {}
    for term, candidates in lookups.items():
        kept = [(words, s) for words, s in candidates if s > 0 and all(w in held for w in words)]
        kept = kept[:TRANSLATIONS]
        if term in held and term.isascii() and (not kept or _CODE_LIKE.search(term)):
            _add(weighted, {term: 1.0})
        total = sum(strength for _, strength in kept)
        for words, strength in kept:
            _add(weighted, {word: strength / total / len(words) for word in words})
    return weighted


def _candidates(found: Lexicon, term: str, language: str) -> list[tuple[tuple[str, ...], float]]:
    """The lexicon's strongest translations of one term, out of `language`."""
    if language == ENGLISH:
        return found.targets(term)[:CANDIDATES]
    return [((english,), strength) for english, strength in found.glosses(term)[:CANDIDATES]]


def _add(into: dict[str, float], weights: Mapping[str, float]) -> None:
    for term, weight in weights.items():
        into[term] = into.get(term, 0.0) + weight
