"""Chinese, Japanese and Korean chunks embedded a second time, by multilingual-e5-small:
"cjk:<spec>".

The model SPEC embeds every chunk, as it would alone (the dataset's `vector` column, and
questions as it asks them); a chunk whose text (what the model reads of it: its heading path
and text for a headings model) is a tenth or more Han, kana or Hangul (`routes`, below) is
also embedded by e5 (`CJK_MODEL`, "passage: …"), into the `cjk_vector` column, which other
chunks leave empty.
A question is embedded by both (e5 as "query: …", only where the dataset holds such
chunks), and the searcher ranks the CJK chunks by e5, the others by SPEC
(tasks/search/ranking.py, `by_vector`).

Why: the default model's multilingual part (USE) reads a long Chinese or Japanese chunk
poorly; e5 finds the answering section far more often, in its own language and from an
English question (benchmarks/RESULTS.md, "Issue 45"). e5 is five times slower than USE, so
only the chunks that need it pay for it: an English corpus embeds as before.

e5's cosines sit in a narrow band that shifts with the question's language and the passages'
length (about 0.65–0.90), the other model's spread from about 0 to 0.6: no fixed map puts
both on one scale. So a routed chunk's score is its cosine's standard score among the
question's routed candidates, put on the other model's scale (`routed_score`: the mean and
spread of the default model's cosines for English questions on English pages of the dev
sets): e5 decides the order among the routed chunks, and the best of them stand beside the
other chunks as a good match of that model would.

Which chunks are routed: those whose model input (heading path and text) has Han, kana or
Hangul for at least ROUTED_SHARE of its letters (a CJK character weighing WIDE_WEIGHT
letters, as language groups count them: tasks/core/scripts.py). So a code block under a
Chinese heading is routed with the prose around it, and a Chinese page's chunks are one
kind; a stray Chinese word in an English page routes nothing.

The embedder's `encode` gives each text both parts side by side ([SPEC's vector | e5's vector
or zeros]); the dataset stores the second part in its own column (ModelInfo.routed_dimension,
tasks/dataset/schema.py), so that everything between the model and the table (caches,
vector reuse, batches) carries one matrix.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from functools import cache
from pathlib import Path

import numpy as np

from tasks.core.scripts import WIDE_WEIGHT, Script, script_counts
from tasks.embed.base import CrossScriptRescorer, Embedder, ModelInfo
from tasks.embed.registry import (
    Backend,
    get_embedder,
    inner_is_prepared,
    model_info,
    parse_spec,
    register,
    token_counter,
    wrapped_model_of,
)

PREFIX = "cjk:"
CJK_MODEL = "e5:multilingual-e5-small"  # what the routed chunks are embedded by
ROUTED_SCRIPTS: tuple[Script, ...] = ("han", "kana", "hangul")  # tasks/core/scripts.py
ROUTED_LANGUAGES = frozenset({"zh", "ja", "ko"})  # the documents' languages they are written in
_LOADER = ThreadPoolExecutor(1, thread_name_prefix="load-routed")  # e5's question encoder


# The share of a model input's letters (CJK characters weighing WIDE_WEIGHT) that routes it.
ROUTED_SHARE = 0.1
# A routed chunk's standard score z becomes CENTRE + SPREAD · z: the default model's mean
# cosine of a question and every chunk, and its spread, for English questions on English
# pages (the maint-guide section set; benchmarks/RESULTS.md, "Issue 45").
CENTRE, SPREAD = 0.234, 0.076


def routes(text: str) -> bool:
    """Whether a model input is embedded by e5 too: at least ROUTED_SHARE of its letters are
    Han, kana or Hangul (see the module doc)."""
    counts = script_counts(text)
    wide = WIDE_WEIGHT * sum(counts.get(script, 0) for script in ROUTED_SCRIPTS)
    letters = wide + sum(n for script, n in counts.items() if script not in ROUTED_SCRIPTS)
    return bool(letters) and wide >= ROUTED_SHARE * letters


def routed_score(standard_score: float) -> float:
    """A routed chunk's score from its cosine's standard score among the question's routed
    candidates, on the other model's scale (see the module doc)."""
    return CENTRE + SPREAD * standard_score


def _info(model: str) -> ModelInfo:
    inner, routed = model_info(model), model_info(CJK_MODEL)
    return replace(
        inner,
        model_id=PREFIX + inner.model_id,
        multilingual=True,
        routed_dimension=routed.dimension,
    )


class CjkEmbedder:
    """Chunks in, [the model's vector | e5's vector, or zeros] out (see the module doc); e5 is
    loaded for the first routed chunk, so an English corpus never loads it."""

    def __init__(self, inner: Embedder, routed_spec: str, info: ModelInfo):
        self.inner, self.info = inner, info
        self._routed_spec = routed_spec

    @property
    def routed(self) -> Embedder:
        return get_embedder(self._routed_spec)

    def encode(self, texts: list[str]) -> np.ndarray:
        width = self.info.routed_dimension
        vectors = np.zeros((len(texts), self.info.dimension + width), np.float32)
        if not texts:
            return vectors
        vectors[:, : self.info.dimension] = self.inner.encode(texts)
        rows = [i for i, text in enumerate(texts) if routes(text)]
        if rows:
            vectors[rows, self.info.dimension :] = self.routed.encode([texts[i] for i in rows])
        return vectors

    def count_tokens(self, texts: list[str]) -> list[int]:
        return self.inner.count_tokens(texts)


class CjkQuestions:
    """Questions in, the model's question vectors out (`encode`); e5's, for the routed chunks,
    from `encode_routed`, its model loaded on first use. Re-scores across scripts as the
    model's questions do, where they do."""

    routed_languages = ROUTED_LANGUAGES

    def __init__(self, inner: Embedder, routed_spec: str, info: ModelInfo):
        self.inner, self.info = inner, replace(info, routed_dimension=0)
        self._routed_spec = routed_spec
        self._routed: Future[Embedder] | None = None
        self._loading = threading.Lock()
        self.rescore_depth = getattr(inner, "rescore_depth", 0)

    def encode(self, texts: list[str]) -> np.ndarray:
        return self.inner.encode(texts)

    def warm_up_routed(self) -> None:
        """Start loading e5's question encoder in a thread of its own (once), so that a
        search that will need it loads it beside its other work; RuntimeError, saying how to
        prepare it, where this machine has not prepared it (a search never prepares a file)."""
        with self._loading:
            if self._routed is None:
                backend, part = parse_spec(self._routed_spec)
                if not backend.is_prepared(part):
                    raise RuntimeError(
                        f"the model {self._routed_spec} that ranks this dataset's Chinese, "
                        "Japanese and Korean chunks is not prepared on this machine: run "
                        f"`python -m tasks.embed.prepare {self._routed_spec}` (or `make install`)"
                    )
                self._routed = _LOADER.submit(_questions_of, self._routed_spec)

    def encode_routed(self, texts: list[str]) -> np.ndarray:
        self.warm_up_routed()
        assert self._routed is not None
        return self._routed.result().encode(texts)

    def routes(self, text: str) -> bool:
        return routes(text)

    def routed_score(self, standard_score: float) -> float:
        return routed_score(standard_score)

    def cross_script_bonus(self, question: str, texts: list[str]) -> np.ndarray:
        if isinstance(self.inner, CrossScriptRescorer):
            return self.inner.cross_script_bonus(question, texts)
        return np.zeros(len(texts), np.float32)

    def count_tokens(self, texts: list[str]) -> list[int]:
        return self.inner.count_tokens(texts)


@cache
def _questions_of(spec: str) -> Embedder:
    backend, part = parse_spec(spec)
    return backend.questions(part) if backend.questions else get_embedder(spec)


def _load(model: str) -> CjkEmbedder:
    return CjkEmbedder(get_embedder(model), CJK_MODEL, _info(model))


def _questions(model: str) -> CjkQuestions:
    return CjkQuestions(_questions_of(model), CJK_MODEL, _info(model))


def _prepare(model: str) -> Path | None:
    made = [backend.prepare(part) for backend, part in map(parse_spec, (model, CJK_MODEL))]
    return next((path for path in reversed(made) if path is not None), None)


register(
    Backend(
        name="cjk",
        module=__name__,
        summary="a model, with Chinese, Japanese and Korean chunks embedded a second time by "
        f"{CJK_MODEL}; MODEL = the model's spec",
        default_model=None,
        info=_info,
        load=_load,
        model_of=lambda model_id: wrapped_model_of(PREFIX, model_id),
        token_counter=token_counter,
        prepare=_prepare,
        # The model's own files: e5's are needed only by a dataset holding CJK chunks (its
        # ingest prepares them; a search of one asks for them: `warm_up_routed`).
        is_prepared=inner_is_prepared,
        questions=_questions,
        parts=lambda model: (model, CJK_MODEL),
    )
)
