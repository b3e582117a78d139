"""Any model, with each chunk's heading path in front of its text: "headings:<spec>".

A dataset records "headings:<the model's id>", so its vectors never mix with those of the
model alone. The encoder is the model's own (questions too, unchanged); what differs is what
the embed step gives it: "<heading path>\\n\\n<text>" for a chunk under a heading, the text
alone for one without (tasks/ingest/reuse.py, `model_input`; ModelInfo.headings says so).
Why: a chunk of a long page often does not name its topic, its headings do. Measured on the
dev sets with the default model (benchmarks/RESULTS.md, "Issue 35, first measurements"):
English questions on the Chinese Debian Handbook 20 → 23 of 24 pages in the first 3, English
questions on the Korean FAQ 28 → 37 of 57, sets without headings unchanged.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from tasks.embed.base import Embedder, ModelInfo
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

PREFIX = "headings:"


def _info(model: str) -> ModelInfo:
    inner = model_info(model)
    return replace(inner, model_id=PREFIX + inner.model_id, headings=True)


class HeadingsEmbedder:
    """The model's encoder under this model's info (its inputs are composed by the caller)."""

    def __init__(self, inner: Embedder, info: ModelInfo):
        self.inner, self.info = inner, info

    def encode(self, texts: list[str]) -> np.ndarray:
        return self.inner.encode(texts)

    def count_tokens(self, texts: list[str]) -> list[int]:
        return self.inner.count_tokens(texts)


def _load(model: str) -> HeadingsEmbedder:
    return HeadingsEmbedder(get_embedder(model), _info(model))


def _questions(model: str) -> Embedder:
    backend, part = parse_spec(model)
    return backend.questions(part) if backend.questions else get_embedder(model)


def _prepare(model: str) -> Path | None:
    backend, part = parse_spec(model)
    return backend.prepare(part)


register(
    Backend(
        name="headings",
        module=__name__,
        summary="a model, each chunk embedded with its heading path in front of its text; "
        "MODEL = the model's spec",
        default_model=None,
        info=_info,
        load=_load,
        model_of=lambda model_id: wrapped_model_of(PREFIX, model_id),
        token_counter=token_counter,
        prepare=_prepare,
        is_prepared=inner_is_prepared,
        questions=_questions,
        parts=lambda model: (model,),
    )
)
