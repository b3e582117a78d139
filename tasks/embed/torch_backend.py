"""A sentence-transformers model run by torch on the CPU, normalised output."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tasks.embed.base import ModelInfo, encode_in_groups


class SentenceTransformerEmbedder:
    """The library's own model and `encode`, one forward pass per token-length group."""

    def __init__(self, path: str | Path, model_id: str):
        import transformers
        from sentence_transformers import SentenceTransformer

        transformers.logging.disable_progress_bar()
        self.model = SentenceTransformer(str(path), device="cpu")
        dimension = self.model.get_embedding_dimension() or 0
        self.info = ModelInfo(model_id, int(dimension), int(self.model.max_seq_length or 0))

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
