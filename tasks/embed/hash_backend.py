"""A deterministic bag-of-words hashing embedder: fast unit tests, never real search."""

from __future__ import annotations

from hashlib import sha256

import numpy as np

from tasks.embed.base import ModelInfo
from tasks.embed.registry import Backend, register

HASH_MAX_TOKENS = 256


def hash_model_info(dimension: int) -> ModelInfo:
    return ModelInfo(f"hash:{dimension}", dimension, HASH_MAX_TOKENS, busy_cores=False)


class HashEmbedder:
    """Signed hashing of the words (and of the whole text) into a unit vector."""

    def __init__(self, dimension: int = 384):
        self.info = hash_model_info(dimension)

    def _vector(self, text: str) -> np.ndarray:
        dimension = self.info.dimension
        vector = np.zeros(dimension, dtype=np.float32)
        # Words, plus the whole text so that texts differing only in spacing still differ:
        # each adds ±1 at a slot, both drawn from the sha256 of its UTF-8 bytes.
        digests = [
            sha256(token.encode()).digest() for token in [*text.lower().split(), "\x00" + text]
        ]
        slots = [int.from_bytes(digest[:4], "little") % dimension for digest in digests]
        np.add.at(vector, slots, [1.0 if digest[4] & 1 else -1.0 for digest in digests])
        norm = float(np.linalg.norm(vector))
        if norm == 0:  # signed hits cancelled out: fall back to the whole text's slot
            vector[slots[-1]] = 1.0
            norm = 1.0
        return vector / norm

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.info.dimension), np.float32)
        return np.stack([self._vector(t) for t in texts])

    def count_tokens(self, texts: list[str]) -> list[int]:
        return count_words(texts)


def count_words(texts: list[str]) -> list[int]:
    """The hash embedder's 'tokens': words plus two special tokens."""
    return [len(text.split()) + 2 for text in texts]


register(
    Backend(
        name="hash",
        module=__name__,
        summary="a hashing embedder for fast tests, never for real search; MODEL = dimension",
        default_model="384",
        info=lambda model: hash_model_info(int(model)),
        load=lambda model: HashEmbedder(int(model)),
        model_of=lambda model_id: (
            model_id.partition(":")[2] if model_id.startswith("hash:") else None
        ),
        token_counter=lambda model: count_words,
    )
)
