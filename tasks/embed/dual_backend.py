# Over 300 lines: the dual model's chunks, questions and cross-script re-scoring share weights.
"""Two models in one vector: an English model for Latin-script text beside a multilingual one.

Spec "dual:<english spec>,<multilingual spec>"; the default for new datasets is
"dual:onnx-int8-token:all-MiniLM-L6-v2,use:multilingual-v3" (tasks/embed/models.py). A
dataset records "dual:<english model id>,<multilingual model id>".

Why two: the English model (all-MiniLM-L6-v2) is the better one on English text (vector
nDCG@10 scifact-train 0.681 against the multilingual USE's 0.399), but reads nothing else
(xquad-zh 0.266, English questions on Chinese paragraphs 0.264); USE carries meaning across
16 languages (xquad-zh 0.883, en→zh 0.830, zh→en 0.822). A vector holds both, in this layout:

    [ English part (d1) | multilingual part (d2) | one "no English part" slot ]

- a text whose letters are mostly Latin, or that has none (code, numbers): (e, u, 0) / √2;
- any other text (Chinese, Japanese, Korean, Cyrillic, …): (0, u, 1) / √2 — the English
  model is not run on it at all (its vector there is noise that hurt en→zh from 0.830 to
  0.768 at equal weights), and the slot keeps the vector unit-length;
- a question mostly in Latin: (√w·e, √(1−w)·u, 0), w = QUESTION_ENGLISH_WEIGHT; any other
  question: (0, u, 0) — the English model cannot read it.

So one cosine search (one column, one ANN index) scores a Latin question against a Latin
chunk by (√w·cos_e + √(1−w)·cos_u)/√2, against any other chunk by √(1−w)·cos_u/√2, and a
question in another script against every chunk by cos_u/√2: a Chinese question weighs
English and Chinese chunks alike. A text's vector does not depend on what shares its batch
(within 1e-5). Token counting and the token window are the English model's, so chunks are
exactly those of the English model alone.

Across scripts a whole chunk's multilingual vector is a blur of its sentences: a Chinese
question about one sentence of an English paragraph meets the paragraph's average. So the
question encoder (`DualQuestions`) also re-scores the searcher's first CROSS_SCRIPT_DEPTH
vector candidates whose script group differs from the question's: it adds the cosine of the
question and the chunk's best-matching sentence (multilingual part, encoded at query time,
weighted as the vector's multilingual part, times BEST_SENTENCE_WEIGHT). Measured on the dev
sets, hybrid nDCG@10 en→zh 0.833 → 0.858, zh→en 0.824 → 0.857; questions and chunks in the
same script are untouched (sentence bonuses there cost the Chinese Debian Handbook questions
a hit in the top 3). See benchmarks/RESULTS.md, "Search quality".
"""

from __future__ import annotations

import math
import re
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import numpy as np

from tasks.core.scripts import language_group
from tasks.embed.base import Embedder, ModelInfo, TokenCounter
from tasks.embed.registry import (
    Backend,
    get_embedder,
    model_info,
    parse_spec,
    register,
    spec_of_model_id,
    token_counter,
)

# w: the English part's share of a Latin question's weight, tuned on the dev sets (xquad-en,
# scifact-train, rust-book questions; 0.9 kept scifact-train at the English model's 0.729).
QUESTION_ENGLISH_WEIGHT = 0.9
_ENGLISH_GROUPS = frozenset({"latin", "no_letters"})  # texts the English part reads
_HALF = 1.0 / math.sqrt(2.0)
# The cross-script re-scoring (see the module doc), tuned on the dev sets: how many vector
# candidates it reads, and the weight of the best sentence's cosine.
CROSS_SCRIPT_DEPTH = 20
BEST_SENTENCE_WEIGHT = 0.5
# Sentences whose multilingual vectors a process keeps (2 KB each: 32 MB), by sentence, not
# by chunk: overlapping chunks, and a chunk written again with one paragraph changed, share
# most of theirs.
SENTENCE_CACHE = 16_384
CHUNK_SCRIPT_CACHE = 4_096  # candidate chunks whose script group a process keeps
# Questions whose multilingual vectors the re-scoring reuses: the last ones encoded, alone or
# in a batch (2 MB; a searcher embeds a batch in slices smaller than this).
ASKED_QUESTIONS = 1024
# Where a chunk's text divides into sentences: after CJK or Latin sentence-final punctuation
# (Latin ones and colons only before a space), and at line breaks.
_SENTENCE_END = re.compile(r"(?<=[。！？!?；;])|(?<=[.:])\s+|\n+")


def reads_english(text: str) -> bool:
    """Whether the English part embeds `text`: mostly Latin letters, or none at all."""
    return language_group(text) in _ENGLISH_GROUPS


@lru_cache(maxsize=CHUNK_SCRIPT_CACHE)
def _chunk_reads_english(text: str) -> bool:
    """`reads_english` of a candidate chunk, kept for the most recent ones like their sentence
    vectors (a script count reads every character of a chunk)."""
    return reads_english(text)


def sentences(text: str) -> list[str]:
    """The non-blank sentences and lines of `text`, stripped; [text] when it has none."""
    found = [part.strip() for part in _SENTENCE_END.split(text) if part and part.strip()]
    return found or [text]


def _parts(model: str) -> tuple[str, str]:
    english, comma, multilingual = model.partition(",")
    if not comma or not english or not multilingual:
        raise ValueError(f"a dual model is '<english spec>,<multilingual spec>', not {model!r}")
    return english, multilingual


def _dual_info(english: ModelInfo, multilingual: ModelInfo) -> ModelInfo:
    """What the pair produces: its model id names both parts; the token window is English's."""
    return ModelInfo(
        f"dual:{english.model_id},{multilingual.model_id}",
        english.dimension + multilingual.dimension + 1,
        english.max_tokens,
        multilingual=True,
    )


class DualEmbedder:
    """Chunks in, [English | multilingual | slot] unit vectors out (see the module doc)."""

    def __init__(self, english: Embedder, multilingual: Embedder):
        self.english, self.multilingual = english, multilingual
        self._d1, self._d2 = english.info.dimension, multilingual.info.dimension
        self.info = _dual_info(english.info, multilingual.info)

    def weighted(
        self,
        texts: list[str],
        latin: tuple[float, float, float],
        other: tuple[float, float],
        multilingual: np.ndarray | None = None,
        english: np.ndarray | None = None,
        reads: np.ndarray | None = None,
    ) -> np.ndarray:
        """Each text's [English part | multilingual part | slot], weighted (English,
        multilingual, slot) for a text that `reads_english`, else (0, multilingual, slot);
        `multilingual`: the texts' multilingual vectors, `english`: the English vectors of
        the texts that read English, in order, where the caller encoded them; `reads`: which
        texts read English, where the caller knows."""
        vectors = np.zeros((len(texts), self.info.dimension), np.float32)
        if not texts:
            return vectors
        d1, d2 = self._d1, self._d2
        if reads is None:
            reads = np.array([reads_english(text) for text in texts], bool)
        vectors[:, d1 : d1 + d2] = (
            self.multilingual.encode(texts) if multilingual is None else multilingual
        )
        rows = np.flatnonzero(reads)
        if rows.size:
            if english is None:
                english = self.english.encode([texts[i] for i in rows])
            vectors[rows, :d1] = english * latin[0]
        vectors[reads, d1 : d1 + d2] *= latin[1]
        vectors[~reads, d1 : d1 + d2] *= other[0]
        vectors[:, -1] = np.where(reads, latin[2], other[1])
        return vectors

    def encode(self, texts: list[str]) -> np.ndarray:
        return self.weighted(texts, latin=(_HALF, _HALF, 0.0), other=(_HALF, _HALF))

    def count_tokens(self, texts: list[str]) -> list[int]:
        return self.english.count_tokens(texts)


class DualQuestions:
    """Questions in, [√w·English | √(1−w)·multilingual | 0] unit vectors out; candidates in
    another script re-scored by their best sentence (a CrossScriptRescorer)."""

    rescore_depth = CROSS_SCRIPT_DEPTH

    def __init__(self, documents: DualEmbedder, asker: Embedder | None = None):
        self.documents = documents
        # the multilingual part's encoder of questions, where it has its own (e5's "query: ")
        self.asker = asker or documents.multilingual
        self.info = documents.info
        # sentence → its multilingual vector, for the most recent SENTENCE_CACHE: a warm
        # process re-scores chunks it has seen without encoding them again
        self._sentence_vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        # question → its multilingual vector, for the last ASKED_QUESTIONS encoded: the
        # re-scoring reads the vector the question's embedding made instead of encoding again
        self._asked: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._side: ThreadPoolExecutor | None = None  # the English part's thread, once used

    def encode(self, texts: list[str]) -> np.ndarray:
        w = QUESTION_ENGLISH_WEIGHT
        # The English part of the Latin questions runs on a second thread beside the
        # multilingual one (both release the GIL for most of their work): an English
        # question's embedding in about the time of the slower model instead of both.
        reads = np.array([reads_english(text) for text in texts], bool)
        latin = [text for text, english in zip(texts, reads, strict=True) if english]
        english = self._side_pool().submit(self.documents.english.encode, latin) if latin else None
        # Kept for `cross_script_bonus` (a question's vector made in a batch differs from the
        # one made alone by about 1e-7).
        multilingual = self.asker.encode(texts)
        with self._cache_lock:
            for text, vector in zip(texts, multilingual, strict=True):
                self._asked[text] = vector.copy()  # not a view that holds the batch
                self._asked.move_to_end(text)
            while len(self._asked) > ASKED_QUESTIONS:
                self._asked.popitem(last=False)
        return self.documents.weighted(
            texts,
            latin=(math.sqrt(w), math.sqrt(1 - w), 0.0),
            other=(1.0, 0.0),
            multilingual=multilingual,
            english=None if english is None else english.result(),
            reads=reads,
        )

    def _side_pool(self) -> ThreadPoolExecutor:
        with self._cache_lock:
            if self._side is None:
                self._side = ThreadPoolExecutor(1, thread_name_prefix="question-english")
            return self._side

    def cross_script_bonus(self, question: str, texts: list[str]) -> np.ndarray:
        """For each text whose script group differs from the question's: BEST_SENTENCE_WEIGHT
        × the cosine of the question and the text's best sentence (multilingual part), on the
        scale of the multilingual part's share of the vectors' cosine; 0 for the others."""
        bonus = np.zeros(len(texts), np.float32)
        latin_question = reads_english(question)
        across = [i for i, text in enumerate(texts) if _chunk_reads_english(text) != latin_question]
        if not across:
            return bonus
        with self._cache_lock:
            asked = self._asked.get(question)
        if asked is None:
            asked = self.asker.encode([question])[0]
        best = [float((matrix @ asked).max()) for matrix in self._sentences_of(texts, across)]
        share = math.sqrt(1 - QUESTION_ENGLISH_WEIGHT) if latin_question else 1.0
        bonus[across] = BEST_SENTENCE_WEIGHT * share * _HALF * np.asarray(best)
        return bonus

    def _sentences_of(self, texts: list[str], rows: list[int]) -> list[np.ndarray]:
        """The sentence vectors of texts[i] for each i in `rows`, a matrix per text: each
        sentence's cached vector, or encoded with the other missing ones in one batch."""
        parts = [sentences(texts[i]) for i in rows]
        with self._cache_lock:
            cache = self._sentence_vectors
            known = {s: cache[s] for part in parts for s in part if s in cache}
        missing = list(dict.fromkeys(s for part in parts for s in part if s not in known))
        if missing:
            encoded = self.documents.multilingual.encode(missing)
            known.update(zip(missing, [row.copy() for row in encoded], strict=True))  # no views
        with self._cache_lock:
            for sentence, vector in known.items():
                cache[sentence] = vector
                cache.move_to_end(sentence)
            while len(cache) > SENTENCE_CACHE:
                cache.popitem(last=False)
        return [np.stack([known[s] for s in part]) for part in parts]

    def count_tokens(self, texts: list[str]) -> list[int]:
        return self.documents.count_tokens(texts)


def _info(model: str) -> ModelInfo:
    english, multilingual = _parts(model)
    return _dual_info(model_info(english), model_info(multilingual))


def _load_part(spec: str) -> Embedder:
    backend, part = parse_spec(spec)
    return backend.load(part)


def _load(model: str) -> DualEmbedder:
    """Both parts, loaded side by side (much of each load runs without the GIL); they belong
    to this model (get_embedder counts one load)."""
    english, multilingual = _parts(model)
    with ThreadPoolExecutor(1, thread_name_prefix="load-multilingual") as pool:
        second = pool.submit(_load_part, multilingual)
        return DualEmbedder(_load_part(english), second.result())


def _questions(model: str) -> DualQuestions:
    documents = get_embedder(f"dual:{model}")
    assert isinstance(documents, DualEmbedder)
    backend, part = parse_spec(_parts(model)[1])
    return DualQuestions(documents, backend.questions(part) if backend.questions else None)


def _model_of(model_id: str) -> str | None:
    """ "dual:<english id>,<multilingual id>" → "<english spec>,<multilingual spec>"."""
    english, comma, multilingual = model_id.removeprefix("dual:").partition(",")
    if not model_id.startswith("dual:") or not comma:
        return None
    english_spec, multilingual_spec = spec_of_model_id(english), spec_of_model_id(multilingual)
    if english_spec is None or multilingual_spec is None:
        return None
    return f"{english_spec},{multilingual_spec}"


def _token_counter(model: str) -> TokenCounter | None:
    return token_counter(_parts(model)[0])


def _prepare(model: str) -> Path | None:
    """Each part's files; the path of the last one made (None when neither needs any)."""
    made = [backend.prepare(part) for backend, part in map(parse_spec, _parts(model))]
    return next((path for path in reversed(made) if path is not None), None)


def _is_prepared(model: str) -> bool:
    return all(backend.is_prepared(part) for backend, part in map(parse_spec, _parts(model)))


register(
    Backend(
        name="dual",
        module=__name__,
        summary="an English model for Latin text beside a multilingual one, in one vector; "
        "MODEL = <english spec>,<multilingual spec>",
        default_model=None,
        info=_info,
        load=_load,
        model_of=_model_of,
        token_counter=_token_counter,
        prepare=_prepare,
        is_prepared=_is_prepared,
        questions=_questions,
        parts=_parts,
    )
)
