"""Combining the rankings of hybrid mode, and one hit per document.

Hybrid mode standardises each list's scores (cosine similarity, BM25) into z-scores over the
candidates that list returned, and ranks chunks by the weighted sum α·z(vector) +
β·z(full text) + γ·z(translated), β = 1 − α unless the coverage gate below lowers it; a chunk
missing from a list counts that list's lowest z-score. Scores on a common scale let a
clearly better match in one list win, where reciprocal-rank fusion only sees ranks. α
depends on the question's script and on the dataset's model:

- an English-only model (ENGLISH_FUSION, datasets built before the multilingual default):
  for a question in Chinese, Japanese or Korean script its vectors carry little, so the
  full-text list leads (α 0.2, else 0.5);
- a multilingual model (MULTILINGUAL_FUSION, the default's): its vectors carry meaning in
  every script (α 0.5 for CJK questions, 0.6 for others), and a weak full-text list does
  not drown them: where the full-text list's best hits hold less than half of the
  question's terms (a Chinese question over English documents matching only a stray
  "Rust"), its weight shrinks in proportion (`coverage`; an empty list weighs nothing), and
  where they hold less than a tenth it weighs nothing: such a list only reorders the
  vectors' hits by one stray word (benchmarks/RESULTS.md, "Issue 35: headings become the
  default").

The third list, the question's words translated into the dataset's other languages
(tasks/search/question.py), exists only for a question the dataset holds documents of
another language for; it weighs γ (0.35 beside the multilingual model's α and β; none for
the English-only model, whose datasets are not translated into). A question without
translations is ranked exactly as before the third list.

A model that routes its Chinese, Japanese and Korean chunks to e5 (ROUTED_FUSION, the
default's) weighs the vectors of a CJK question like any other's (α 0.6: e5 reads those
chunks far better than the multilingual part did), and those of a question in a language the
dataset holds no documents in, that no dictionary translates (an English question on Korean
pages), at 1: its own words meet only the identifiers the pages share with it, which cost
the Korean set more than they found (benchmarks/RESULTS.md, "Issue 45").

The weights, the coverage gate and the candidate depth were tuned on the dev sets only
(`python -m benchmarks.quality --tune`; benchmarks/RESULTS.md, "Search quality").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tasks.search.hits import FoundBy, Hit
from tasks.search.question import Question


@dataclass(frozen=True)
class Fusion:
    """How hybrid mode weighs its lists."""

    vector_weight: float = 0.5  # α for questions in other scripts
    cjk_vector_weight: float = 0.2  # α for questions mostly in Han, kana or Hangul
    depth: int = 50  # candidates taken from each list
    # The share of the question's terms the full-text list's best hits must hold for its
    # full weight (1 − α); below it the weight shrinks in proportion. None: always full.
    full_coverage: float | None = None
    # Below this share of the question's terms the full-text list weighs nothing.
    min_coverage: float = 0.0
    # γ: the weight of the translated list (the question's words in the dataset's other
    # languages), beside α and β; 0: not fused.
    translated_weight: float = 0.0
    # α for a question in a language the dataset holds no documents in (Question.across)
    # that no dictionary translates into theirs (an English question on Korean pages): its
    # own words meet only the identifiers the pages share with it. None: as for any other.
    across_vector_weight: float | None = None

    def weight_for(self, question: Question) -> float:
        untranslated = question.across and not question.translations
        if untranslated and self.across_vector_weight is not None:
            return self.across_vector_weight
        return self.cjk_vector_weight if question.cjk else self.vector_weight

    def text_weight(self, question: Question, coverage: float) -> float:
        """The full-text list's weight, given the share of the question's terms its best
        hits hold (see `term_coverage`)."""
        full = 1 - self.weight_for(question)
        if self.full_coverage is None:
            return full
        if coverage < self.min_coverage:
            return 0.0
        return full * min(1.0, coverage / self.full_coverage)

    def fuse(
        self,
        question: Question,
        by_vector: list[Hit],
        by_text: list[Hit],
        limit: int,
        coverage: float = 1.0,
        by_translation: list[Hit] | None = None,
    ) -> list[Hit]:
        """The `limit` best chunks of the lists by their weighted z-scores, each marked with
        the list(s) that found it (`found_by`: the translated list is a full-text one);
        `coverage` as for `text_weight`. Beside a list with hits, one that weighs nothing adds
        none (they would tie with the other list's last); alone, a list keeps its order."""
        weights = [
            self.weight_for(question),
            self.text_weight(question, coverage),
            self.translated_weight,
        ]
        lists = [by_vector, by_text, by_translation or []]
        if any(hits for hits, weight in zip(lists, weights, strict=True) if weight):
            lists = [hits if weight else [] for hits, weight in zip(lists, weights, strict=True)]
        scores = [standardised(hits) for hits in lists]
        floors = [min(found.values(), default=0.0) for found in scores]
        hits = {hit.chunk_id: hit for hit in [*lists[2], *lists[1], *lists[0]]}
        fused = {
            chunk_id: sum(
                weight * found.get(chunk_id, floor)
                for weight, found, floor in zip(weights, scores, floors, strict=True)
            )
            for chunk_id in hits
        }
        order = sorted(fused, key=lambda chunk_id: -fused[chunk_id])[:limit]
        return [
            replace(
                hits[chunk_id].rescored(fused[chunk_id]),
                found_by=found_by(
                    chunk_id in scores[0], chunk_id in scores[1] or chunk_id in scores[2]
                ),
            )
            for chunk_id in order
        ]


ENGLISH_FUSION = Fusion()
MULTILINGUAL_FUSION = Fusion(
    vector_weight=0.6,
    cjk_vector_weight=0.5,
    full_coverage=0.5,
    min_coverage=0.1,
    translated_weight=0.35,
)
# A model whose Chinese, Japanese and Korean chunks e5 ranks (tasks/embed/cjk_backend.py):
# its vectors carry more of a CJK question (α 0.6 for them too), and a question no dictionary
# translates into the documents' language is ranked by them alone (α 1).
ROUTED_FUSION = replace(MULTILINGUAL_FUSION, cjk_vector_weight=0.6, across_vector_weight=1.0)
COVERAGE_HITS = 10  # the full-text hits whose terms `term_coverage` reads


def fusion_for(multilingual: bool, routed: bool = False) -> Fusion:
    """How hybrid mode weighs its lists for a dataset whose model is (or is not) multilingual
    and routes (or not) its CJK chunks to a second model."""
    if routed:
        return ROUTED_FUSION
    return MULTILINGUAL_FUSION if multilingual else ENGLISH_FUSION


def term_coverage(question_terms: list[str], hit_terms: list[str]) -> float:
    """The share of the question's analysed terms that occur in the best full-text hits'
    analysed text (`search_text` of the first COVERAGE_HITS); 0 for no terms or no hits."""
    wanted = set(question_terms)
    if not wanted:
        return 0.0
    found = set().union(
        *(wanted.intersection(terms.split()) for terms in hit_terms[:COVERAGE_HITS])
    )
    return len(found) / len(wanted)


def standardised(hits: list[Hit]) -> dict[str, float]:
    """chunk_id → z-score of its score among `hits` (0 when all scores are equal)."""
    scores = [hit.score for hit in hits]
    if not scores:
        return {}
    # math.fsum: as exact as statistics.pstdev's fractions, at a hundredth of the cost
    mean = math.fsum(scores) / len(scores)
    spread = math.sqrt(math.fsum((score - mean) ** 2 for score in scores) / len(scores))
    return {hit.chunk_id: (hit.score - mean) / spread if spread else 0.0 for hit in hits}


def found_by(in_vector: bool, in_text: bool) -> FoundBy:
    """Which of the two lists found a chunk that is in at least one of them."""
    return "both" if in_vector and in_text else "vector" if in_vector else "text"


def best_per_doc(hits: list[Hit]) -> list[Hit]:
    """The first (best-ranked) hit of each document, in rank order."""
    best: dict[str, Hit] = {}
    for hit in hits:
        best.setdefault(hit.doc_id, hit)
    return list(best.values())
