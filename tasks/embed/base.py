"""What every embedding backend is, and the forward-pass grouping they share.

An `Embedder` turns texts into unit-length float32 vectors; `ModelInfo` says what a model
produces without loading it (the dataset fingerprint needs only that, so a run with nothing
to embed never loads a model).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from tasks.core.cores import usable_cores, workers_from_env

ENCODE_BATCH_SIZE = 64  # texts per forward pass
WORKERS_ENV = "DOC_INDEXER_EMBED_WORKERS"

TokenCounter = Callable[[list[str]], list[int]]


@dataclass(frozen=True)
class ModelInfo:
    """What a model spec produces: recorded in the dataset fingerprint."""

    model_id: str  # names the weights and the backend, so vectors of two backends never mix
    dimension: int
    max_tokens: int  # the model's token window, special tokens included
    # Whether questions and texts in other languages than English share its vector space
    # (not recorded: it follows from the model id; hybrid mode weighs the lists by it).
    multilingual: bool = False
    # Whether its forward passes keep this machine's cores busy (not recorded). False for the
    # hash embedder: then parsing is what a run waits for, and it gets every core.
    busy_cores: bool = True
    # Whether a chunk is embedded with its heading path in front of its text (not recorded:
    # it follows from the model id, "headings:<id>"; tasks/embed/headings_backend.py).
    headings: bool = False
    # The width of a second vector that the model gives the chunks of some scripts, after the
    # first (`dimension`), zeros for the other chunks; 0: none (tasks/embed/cjk_backend.py).
    # The dataset keeps it in a column of its own.
    routed_dimension: int = 0


class Embedder(Protocol):
    """A loaded model: texts in, one unit-length float32 row per text out."""

    info: ModelInfo

    def encode(self, texts: list[str]) -> np.ndarray: ...

    def count_tokens(self, texts: list[str]) -> list[int]: ...


@runtime_checkable
class CrossScriptRescorer(Protocol):
    """A question encoder that also re-scores candidates written in another script than the
    question (tasks/embed/dual_backend.py): the searcher adds `cross_script_bonus` to the
    scores of its first `rescore_depth` vector candidates."""

    rescore_depth: int

    def cross_script_bonus(self, question: str, texts: list[str]) -> np.ndarray: ...


@runtime_checkable
class RoutedQuestions(Protocol):
    """A question encoder whose model embeds the chunks of some scripts a second time, by a
    second model (ModelInfo.routed_dimension; tasks/embed/cjk_backend.py): where the dataset
    holds documents in `routed_languages`, the searcher ranks those chunks by the second
    model's vector of the question (`encode_routed`; a chunk's cosine's standard score among
    the question's routed candidates put on the first model's scale by `routed_score`), the
    others by the first model's (`encode`)."""

    routed_languages: frozenset[str]

    def warm_up_routed(self) -> None: ...

    def encode_routed(self, texts: list[str]) -> np.ndarray: ...

    def routes(self, model_input: str) -> bool: ...

    def routed_score(self, standard_score: float) -> float: ...


def model_input(text: str, section: str, headings: bool) -> str:
    """What a model embeds of a chunk: its text; for a model that reads headings
    (ModelInfo.headings), its heading path, a blank line, then its text (a chunk under no
    heading: its text)."""
    return f"{section}\n\n{text}" if headings and section else text


def token_length_groups(token_counts: list[int], size: int = ENCODE_BATCH_SIZE) -> list[list[int]]:
    """Text indices in groups of `size`, longest token counts first, for one forward pass each.

    A forward pass pads every text to the longest in its group, so texts of similar token
    count belong together. sentence-transformers sorts by characters, which is a poor proxy
    when prose and code mix (see benchmarks/RESULTS.md, "Pipelining and memory").
    """
    order = sorted(range(len(token_counts)), key=lambda i: -token_counts[i])
    return [order[start : start + size] for start in range(0, len(order), size)]


def encode_in_groups(
    embedder: Embedder, texts: list[str], encode_group: Callable[[list[str]], np.ndarray]
) -> np.ndarray:
    """Unit vectors in input order, encoded by `encode_group` in token-length groups."""
    vectors = np.zeros((len(texts), embedder.info.dimension), dtype=np.float32)
    window = embedder.info.max_tokens
    counts = [min(n, window) for n in embedder.count_tokens(texts)] if texts else []
    for rows in token_length_groups(counts):
        vectors[rows] = encode_group([texts[i] for i in rows])
    return vectors


def default_workers() -> int:
    """Embedding threads: $DOC_INDEXER_EMBED_WORKERS, else one per core this process may use."""
    return workers_from_env(WORKERS_ENV, usable_cores())


def tokenizer_file_counter(folder: Path | str) -> TokenCounter | None:
    """Counts tokens with the folder's tokenizer.json (special tokens included, nothing
    truncated), so splitting never loads weights; None where the folder has no such file."""
    tokenizer_file = Path(folder) / "tokenizer.json"
    if not tokenizer_file.is_file():
        return None
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    tokenizer.no_truncation()
    tokenizer.no_padding()

    def count(texts: list[str]) -> list[int]:
        return [len(encoding.ids) for encoding in tokenizer.encode_batch(texts)]

    return count
