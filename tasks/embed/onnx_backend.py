"""The same sentence-transformers model run by onnxruntime: fp32, or int8 (dynamic quantisation).

Selected with the model spec "onnx:<model>" or "onnx-int8:<model>", for example
"onnx-int8:all-MiniLM-L6-v2". The transformer is exported once with torch into
`.cache/onnx/<model>-<weights hash>/` in the project (then quantised for int8) and reused by
every later process. Tokenisation uses the model's own tokenizer.json; pooling
(attention-masked mean) and normalisation match the sentence-transformers pipeline of
all-MiniLM-L6-v2. The model id recorded in a dataset gets the suffix "+onnx-fp32" or
"+onnx-int8", so vectors of different backends never mix.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from tasks.core.records import sha256_hex
from tasks.embed.base import ModelInfo, encode_in_groups

CACHE_DIR = Path(__file__).resolve().parents[2] / ".cache" / "onnx"
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _weights_hash(model_path: Path) -> str:
    weights = model_path / "model.safetensors"
    return sha256_hex(weights.read_bytes())[:16]


def export_onnx(model_path: Path, quantized: bool) -> Path:
    """The ONNX file for a local sentence-transformers model folder, exported on first use."""
    target = CACHE_DIR / f"{model_path.name}-{_weights_hash(model_path)}"
    target.mkdir(parents=True, exist_ok=True)
    fp32 = target / "model.onnx"
    if not fp32.exists():
        _export_fp32(model_path, fp32)
    if not quantized:
        return fp32
    int8 = target / "model-int8-matmul-per-channel.onnx"
    if not int8.exists():
        from onnxruntime.quantization import QuantType, quantize_dynamic

        partial = int8.with_suffix(f".{os.getpid()}.tmp")
        # Only the MatMul weights, one scale per output channel: cosine to fp32 >= 0.987 on
        # sample texts, where quantising every op with one scale per tensor gave ~0.91.
        quantize_dynamic(
            str(fp32),
            str(partial),
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul"],
            per_channel=True,
        )
        partial.replace(int8)  # atomic: a concurrent process never sees half a file
    return int8


def _export_fp32(model_path: Path, target: Path) -> None:
    import torch
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(str(model_path)).eval()

    class LastHiddenState(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    sample = AutoTokenizer.from_pretrained(str(model_path))(
        ["an example", "a slightly longer example sentence"], padding=True, return_tensors="pt"
    )
    axes = {name: {0: "batch", 1: "tokens"} for name in (*_INPUTS, "last_hidden_state")}
    partial = target.with_suffix(f".{os.getpid()}.tmp")
    torch.onnx.export(
        LastHiddenState(),
        tuple(sample[name] for name in _INPUTS),
        str(partial),
        input_names=list(_INPUTS),
        output_names=["last_hidden_state"],
        dynamic_axes=axes,
        opset_version=17,
        dynamo=False,
    )
    partial.replace(target)


def onnx_model_info(model_path: Path, base_model_id: str, quantized: bool) -> ModelInfo:
    """What the exported model produces, read from the model folder's configuration."""
    config = json.loads((model_path / "sentence_bert_config.json").read_text())
    dimension = int(json.loads((model_path / "config.json").read_text())["hidden_size"])
    suffix = "int8" if quantized else "fp32"
    return ModelInfo(f"{base_model_id}+onnx-{suffix}", dimension, int(config["max_seq_length"]))


class OnnxEmbedder:
    """An exported transformer in onnxruntime with mean pooling and normalisation."""

    def __init__(self, model_path: Path, base_model_id: str, quantized: bool):
        import onnxruntime
        from tokenizers import Tokenizer

        self.info = onnx_model_info(model_path, base_model_id, quantized)
        self._counter = Tokenizer.from_file(str(model_path / "tokenizer.json"))
        self._counter.no_truncation()
        self._counter.no_padding()
        self._tokenizer = Tokenizer.from_file(str(model_path / "tokenizer.json"))
        self._tokenizer.enable_truncation(self.info.max_tokens)
        self._tokenizer.enable_padding()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = os.cpu_count() or 1
        self._session = onnxruntime.InferenceSession(
            str(export_onnx(model_path, quantized)), options, providers=["CPUExecutionProvider"]
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
