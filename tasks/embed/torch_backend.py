"""A sentence-transformers model run by torch on the CPU, normalised output.

Its specs are "torch:<model>", or the model alone where it is the bundled model's name
("all-MiniLM-L6-v2", the default before the ONNX backends, so older datasets record it) or a
sentence-transformers folder on disk (offline: nothing is fetched from a hub).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tasks.embed.base import Embedder, ModelInfo, encode_in_groups, tokenizer_file_counter
from tasks.embed.registry import BUNDLED_MODEL, BUNDLED_MODEL_ID, Backend, register, resolve_model

# Modules of a sentence-transformers folder whose output size is the transformer's hidden size.
_PLAIN_MODULES = {"Transformer", "Pooling", "Normalize"}


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


def _folder_info(path: Path | str, model_id: str) -> ModelInfo | None:
    """ModelInfo from a sentence-transformers folder's configuration; None where it does not
    say (no such folder, or modules that change the output size)."""
    folder = Path(path)
    try:
        modules = json.loads((folder / "modules.json").read_text())
        config = json.loads((folder / "sentence_bert_config.json").read_text())
        hidden = json.loads((folder / "config.json").read_text())["hidden_size"]
    except (OSError, ValueError, KeyError):
        return None
    if any(module["type"].rsplit(".", 1)[-1] not in _PLAIN_MODULES for module in modules):
        return None
    return ModelInfo(model_id, int(hidden), int(config["max_seq_length"]))


def _load(model: str) -> Embedder:
    return SentenceTransformerEmbedder(*resolve_model(model))


def _info(model: str) -> ModelInfo:
    return _folder_info(*resolve_model(model)) or _load_once(model).info


def _load_once(model: str) -> Embedder:
    from tasks.embed.registry import get_embedder  # the process-wide cache of loaded models

    return get_embedder(TORCH.spec(model))


def _model_of(model_id: str) -> str | None:
    """The bundled model's id, or an id without another backend's marks (a name or path)."""
    if model_id == BUNDLED_MODEL_ID:
        return BUNDLED_MODEL
    return None if "+" in model_id or ":" in model_id else model_id


def _questions(model: str) -> Embedder:
    """The bundled model's questions go to its fp32 ONNX export where it is prepared: no torch
    import, cosine >= 0.9999 to torch (tests/test_embed.py); else to torch itself."""
    from tasks.embed.registry import get_embedder

    onnx = f"onnx:{model}"
    if model == BUNDLED_MODEL and Path(resolve_model(model)[0]).is_dir():
        from tasks.embed.registry import parse_spec

        backend, onnx_model = parse_spec(onnx)
        if backend.is_prepared(onnx_model):
            return get_embedder(onnx)
    return _load_once(model)


TORCH = register(
    Backend(
        name="torch",
        module=__name__,
        summary="sentence-transformers on torch, fp32; MODEL = all-MiniLM-L6-v2 or a folder",
        default_model=None,
        info=_info,
        load=_load,
        model_of=_model_of,
        token_counter=lambda model: tokenizer_file_counter(resolve_model(model)[0]),
        questions=_questions,
        bare_models=True,
    )
)
