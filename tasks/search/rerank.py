"""Re-rank search candidates with a sentence-transformers cross-encoder on disk (`--rerank`).

A cross-encoder reads the question and a chunk's text together and scores how well the text
answers it: slower than comparing vectors, so it re-scores only the first stage's best
candidates (`rerank_depth`, see tasks/search/searcher.py) and re-orders them by that score.

The model is loaded from a local folder only (never from the hub), once per folder per
process, and only when a search asks for it: a search without `rerank` imports nothing of
this. A folder that holds no usable cross-encoder is a RerankerError naming the folder.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from tasks.search.hits import Hit

# Scores one (question, text) pair each, higher = more relevant.
PairScorer = Callable[[list[tuple[str, str]]], list[float]]


class RerankerError(Exception):
    """The --rerank folder holds no cross-encoder that can be used; the message says why."""


def cross_encoder(path: str) -> PairScorer:
    """The scorer of the cross-encoder in folder `path`, loaded once per folder per process."""
    return _load(str(Path(path).expanduser().resolve()))


@lru_cache(maxsize=4)
def _load(folder: str) -> PairScorer:
    _check_folder(Path(folder))
    try:
        import transformers
        from sentence_transformers import CrossEncoder

        transformers.logging.disable_progress_bar()
        model = CrossEncoder(folder, local_files_only=True, device="cpu")
    except Exception as exc:  # noqa: BLE001 - any loading failure is the folder's problem
        raise RerankerError(f"cannot load a cross-encoder from {folder}: {exc}") from None
    if model.num_labels != 1:
        raise RerankerError(
            f"{folder} holds a classifier with {model.num_labels} labels; reranking needs a "
            "cross-encoder that gives one relevance score per pair"
        )

    def score(pairs: list[tuple[str, str]]) -> list[float]:
        return [float(s) for s in model.predict(pairs, show_progress_bar=False)]

    return score


def _check_folder(folder: Path) -> None:
    """Refuse what sentence-transformers would load anyway with a random scoring head: a
    missing folder, or a model without a sequence-classification head (e.g. an embedding
    model such as all-MiniLM-L6-v2)."""
    if not folder.is_dir():
        raise RerankerError(f"no cross-encoder at {folder}: not a folder")
    try:
        config = json.loads((folder / "config.json").read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise RerankerError(
            f"no cross-encoder at {folder}: no readable config.json ({exc})"
        ) from None
    architectures = config.get("architectures") or []
    if not any(str(name).endswith("ForSequenceClassification") for name in architectures):
        raise RerankerError(
            f"{folder} is not a cross-encoder: its config.json names {architectures or 'no'} "
            "architecture, not a …ForSequenceClassification scoring head"
        )


def rerank(question: str, hits: list[Hit], score_pairs: PairScorer) -> list[Hit]:
    """The hits re-ordered by the cross-encoder's score of (question, hit text), best first,
    each with that score; equal scores keep the first stage's order."""
    if not hits:
        return []
    scores = score_pairs([(question, hit.text) for hit in hits])
    order = sorted(range(len(hits)), key=lambda i: -scores[i])
    return [hits[i].rescored(scores[i]) for i in order]
