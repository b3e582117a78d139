"""The same sentence-transformers model run by onnxruntime: fp32, or int8 (dynamic quantisation).

Selected with the model spec "onnx:<model>" or "onnx-int8:<model>", for example
"onnx-int8:all-MiniLM-L6-v2". The transformer is exported once with torch (then quantised
for int8) into the ONNX cache (tasks/embed/onnx_files.py) and reused by every later process.
Tokenisation uses the model's own tokenizer.json; pooling (attention-masked mean) and
normalisation match the sentence-transformers pipeline of all-MiniLM-L6-v2. The model id
recorded in a dataset gets the suffix "+onnx-fp32" or "+onnx-int8", so vectors of different
backends never mix. The fp32 file also encodes questions without torch for datasets built by
the torch backend (tasks/embed/models.py, `query_embedder`): cosine >= 0.9999 to torch.

int8 here is onnxruntime's dynamic quantisation, whose activation scale is taken per forward
pass: a text's vector depends on which texts share its pass. The default backend
(tasks/embed/token_backend.py) takes it per token instead.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tasks.embed import onnx_files
from tasks.embed.base import Embedder, ModelInfo, encode_in_groups, tokenizer_file_counter
from tasks.embed.registry import BUNDLED_MODEL, BUNDLED_MODEL_ID, Backend, register, resolve_model

ONNX_SUFFIX = "+onnx-"  # model ids of the ONNX backends: <base id>+onnx-<variant>


def onnx_model_info(model_path: Path, base_model_id: str, variant: str) -> ModelInfo:
    """What an ONNX variant of the model produces, read from the model folder's configuration;
    its model id is the base id + "+onnx-" + the variant ("fp32", "int8", "int8-token")."""
    config = json.loads((model_path / "sentence_bert_config.json").read_text())
    dimension = int(json.loads((model_path / "config.json").read_text())["hidden_size"])
    return ModelInfo(f"{base_model_id}+onnx-{variant}", dimension, int(config["max_seq_length"]))


class OnnxEmbedder:
    """An exported transformer in onnxruntime with mean pooling and normalisation."""

    def __init__(self, onnx_file: Path, model_path: Path, info: ModelInfo):
        import onnxruntime
        from tokenizers import Tokenizer

        self.info = info
        self._counter = Tokenizer.from_file(str(model_path / "tokenizer.json"))
        self._counter.no_truncation()
        self._counter.no_padding()
        self._tokenizer = Tokenizer.from_file(str(model_path / "tokenizer.json"))
        self._tokenizer.enable_truncation(self.info.max_tokens)
        self._tokenizer.enable_padding()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = os.cpu_count() or 1
        self._session = onnxruntime.InferenceSession(
            str(onnx_file), options, providers=["CPUExecutionProvider"]
        )

    def _encode_group(self, texts: list[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch(texts)
        feed = {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
        }
        hidden = self._session.run(None, feed)[0]
        mask = feed["attention_mask"][..., None].astype(np.float32)
        pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
        return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)

    def encode(self, texts: list[str]) -> np.ndarray:
        return encode_in_groups(self, texts, self._encode_group)

    def count_tokens(self, texts: list[str]) -> list[int]:
        return [len(e.ids) for e in self._counter.encode_batch(texts)]


def register_onnx_variant(
    name: str,
    variant: str,
    summary: str,
    make: Callable[[Path, Path, ModelInfo], Embedder],
    module: str,
) -> Backend:
    """Register, for the module `module`, the backend `name` that runs a sentence-transformers
    model as the ONNX file `variant` (tasks/embed/onnx_files.py), made by `make(onnx file,
    model folder, info)`."""

    def folder(model: str) -> Path:
        return Path(resolve_model(model)[0])

    def info(model: str) -> ModelInfo:
        return onnx_model_info(folder(model), resolve_model(model)[1], variant)

    def load(model: str) -> Embedder:
        onnx_file = onnx_files.prepare_logged(folder(model), variant, f"{name}:{model}")
        return make(onnx_file, folder(model), info(model))

    def model_of(model_id: str) -> str | None:
        base, suffix, recorded = model_id.partition(ONNX_SUFFIX)
        if not suffix or recorded != variant:
            return None
        return BUNDLED_MODEL if base == BUNDLED_MODEL_ID else base

    return register(
        Backend(
            name=name,
            module=module,
            summary=summary,
            default_model=None,
            info=info,
            load=load,
            model_of=model_of,
            token_counter=lambda model: tokenizer_file_counter(folder(model)),
            prepare=lambda model: onnx_files.prepare(folder(model), variant),
            is_prepared=lambda model: onnx_files.is_prepared(folder(model), variant),
        )
    )


register_onnx_variant("onnx", "fp32", "onnxruntime, fp32", OnnxEmbedder, __name__)
register_onnx_variant(
    "onnx-int8", "int8", "onnxruntime, int8 with dynamic quantisation", OnnxEmbedder, __name__
)
