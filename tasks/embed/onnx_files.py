"""The ONNX files of a sentence-transformers model, made once per machine: export, quantise.

`python -m tasks.embed.prepare` (tasks/embed/prepare.py) makes them ahead of time; an ingest
that needs a missing one makes it itself (`prepare_logged`); a query never does.

Variants, each one file in `<cache>/<model folder>-<weights sha256[:16]>/`:
- "fp32": the transformer exported by torch (the only step that needs torch/transformers);
- "int8": onnxruntime's dynamic quantisation of the MatMuls (the "onnx-int8:" backend);
- "int8-token": every MatMul with a constant weight rewritten to int8 with one scale per
  output channel for the weight and one scale and zero point per token for the activation,
  computed in the graph at run time (`rewrite_per_token`; onnx and numpy only, ~1 s,
  reproducible byte for byte). Recipe r2 (r1 before it: the same vectors, slower).

The cache is `.cache/onnx/` in the project, or the folder `DOC_INDEXER_ONNX_CACHE` names.
Every file is written under a temporary name, synced and renamed into place, so a concurrent
process sees no file or a whole one, never half; two processes preparing at once both
succeed (the second rename replaces an identical file). The weights digest that names the
folder is memoised by (path, size, mtime), so opening a model does not re-read 90 MB.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

CACHE_ENV = "DOC_INDEXER_ONNX_CACHE"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# variant -> file name. A changed recipe must take a new file name (and a new model id
# suffix where it changes the vectors): a file once written is never rewritten.
FILES = {
    "fp32": "model.onnx",
    "int8": "model-int8-matmul-per-channel.onnx",
    "int8-token": "model-int8-token-r2.onnx",
}


def cache_dir() -> Path:
    """Where prepared files live: $DOC_INDEXER_ONNX_CACHE, else the project's .cache/onnx."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[2] / ".cache" / "onnx"


def weights_digest(weights: Path) -> str:
    """sha256[:16] of a weights file, memoised in the cache by (path, size, mtime)."""
    stat = weights.stat()
    key = f"{weights.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    memo = cache_dir() / "digests.json"
    try:
        known: dict[str, str] = json.loads(memo.read_text("utf-8"))
    except (OSError, ValueError):
        known = {}
    if key in known:
        return known[key]
    digest = hashlib.sha256()
    with weights.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    known[key] = digest.hexdigest()[:16]
    try:
        write_atomically(memo, lambda tmp: tmp.write_text(json.dumps(known), "utf-8"))
    except OSError:  # a read-only cache: hash again next time, still correct
        pass
    return known[key]


def onnx_file(model_path: Path, variant: str) -> Path:
    """Where `variant` of the model at `model_path` is (or will be) prepared."""
    folder = cache_dir() / f"{model_path.name}-{weights_digest(model_path / 'model.safetensors')}"
    return folder / FILES[variant]


def is_prepared(model_path: Path, variant: str) -> bool:
    """Whether `variant` is ready to load (False where the model folder has no weights)."""
    try:
        return onnx_file(model_path, variant).is_file()
    except OSError:
        return False


def prepare(model_path: Path, variant: str) -> Path:
    """The file of `variant`, made now if it is missing (idempotent, safe to race)."""
    target = onnx_file(model_path, variant)
    if target.is_file():
        return target
    if variant == "fp32":
        return write_atomically(target, lambda tmp: _export_fp32(model_path, tmp))
    source = prepare(model_path, "fp32")
    recipe = _quantise_dynamic if variant == "int8" else rewrite_per_token
    return write_atomically(target, lambda tmp: recipe(source, tmp))


def prepare_logged(model_path: Path, variant: str, spec: str) -> Path:
    """`prepare`, with one line on stderr saying that it prepared and how long it took."""
    if is_prepared(model_path, variant):
        return onnx_file(model_path, variant)
    started = time.perf_counter()
    path = prepare(model_path, variant)
    print(
        f"prepared the embedding model {spec} for this machine in "
        f"{time.perf_counter() - started:.1f} s (once; kept in {path.parent})",
        file=sys.stderr,
        flush=True,
    )
    return path


def write_atomically(target: Path, write: Callable[[Path], Any]) -> Path:
    """`write(temporary path)`, then rename it onto `target`: readers never see half a file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    stem = f".{target.stem}.{os.getpid()}.{threading.get_ident()}"
    tmp = target.with_name(f"{stem}.tmp{target.suffix}")
    try:
        write(tmp)
        with tmp.open("rb") as written:  # the bytes are on disk before the name points at them
            os.fsync(written.fileno())
        os.replace(tmp, target)
    finally:
        for leftover in target.parent.glob(f"{stem}*"):  # ours, and any a tool wrote beside it
            leftover.unlink(missing_ok=True)
    return target


def _export_fp32(model_path: Path, target: Path) -> None:
    """The transformer (last hidden state) exported by torch, batch and tokens dynamic."""
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModel

    # Eager attention: plain MatMul/Softmax nodes, the graph the int8 rewrites were measured on.
    model = AutoModel.from_pretrained(str(model_path), attn_implementation="eager").eval()

    class LastHiddenState(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    tokenizer = Tokenizer.from_file(str(model_path / "tokenizer.json"))
    tokenizer.enable_padding()
    encodings = tokenizer.encode_batch(["an example", "a slightly longer example sentence"])
    sample = {
        "input_ids": [e.ids for e in encodings],
        "attention_mask": [e.attention_mask for e in encodings],
        "token_type_ids": [e.type_ids for e in encodings],
    }
    axes = {name: {0: "batch", 1: "tokens"} for name in (*INPUTS, "last_hidden_state")}
    with torch.no_grad():
        torch.onnx.export(
            LastHiddenState(),
            tuple(torch.tensor(sample[name], dtype=torch.int64) for name in INPUTS),
            str(target),
            input_names=list(INPUTS),
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
            opset_version=17,
            do_constant_folding=True,
            dynamo=False,
        )


def _quantise_dynamic(source: Path, target: Path) -> None:
    """onnxruntime's dynamic quantisation: MatMul weights int8 per output channel (cosine to
    fp32 >= 0.987 on sample texts; every op with one scale per tensor gave ~0.91). Its
    activation scale is taken per forward pass, so a vector depends on its pass-mates."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        str(source),
        str(target),
        weight_type=QuantType.QInt8,
        op_types_to_quantize=["MatMul"],
        per_channel=True,
    )


def rewrite_per_token(source: Path, target: Path) -> None:
    """Every MatMul with a constant [K, N] weight -> int8 with PER-TOKEN activation scales.

    Weight: symmetric int8, one scale per output column (w = ws[n] * wq[k, n]).
    Activation, each row (token) of the input, flattened to [M, K], on its own, asymmetric:
    s = (max - min) / 255, z = round(-min / s), q = clip(round(x / s) + z, 0, 255) in uint8
    (min and max of the row, widened to take in 0); MatMulInteger's exact int32 product minus
    z * sum_k wq[k, n] is sum_k (q_k - z) wq[k, n], scaled back by s (per row) and ws (per
    column). No statistic spans two tokens, so a text's vector cannot depend on what shares
    its forward pass, nor on padding; the integer GEMM is onnxruntime's U8S8 kernel. An input
    shared by several MatMuls (Q, K, V) is quantised once.

    Recipe r2: the row's quantisation is one QuantizeLinear (per row: x / s, rounded half to
    even, plus z, saturated) and the int32 product's scaling one DequantizeLinear (float times
    s, per row), where r1 spelt out Div, Round, Add, Clip and Cast, and Cast and Mul, as
    full-size passes: the same arithmetic in the same order, so the same vectors (measured
    bit-identical on the Rust book's chunks), in ~15% less time. (onnxruntime's MatMulInteger
    takes no per-row zero point, so z * column sums is still subtracted.) Widening min and
    max to 0 keeps z within uint8; r1 had no such bound, and differs only on a row whose
    values all share one sign (none in the Rust book's chunks).
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(source))
    graph = model.graph
    weights = {t.name: t for t in graph.initializer}
    uses: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
    constants: dict[str, np.ndarray] = {
        "pt_255": np.array(255.0, np.float32),
        "pt_0": np.array(0.0, np.float32),
        "pt_eps": np.array(1e-12, np.float32),
        "pt_axis1": np.array([1], np.int64),
    }
    graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in constants.items())
    quantised: dict[str, tuple[str, str, str, str]] = {}  # input -> (q, scales, zeros, lead)
    nodes: list[Any] = []
    dropped: set[str] = set()
    make = helper.make_node
    for node in graph.node:
        weight = weights.get(node.input[1]) if node.op_type == "MatMul" else None
        if weight is None or len(weight.dims) != 2:
            nodes.append(node)
            continue
        x = node.input[0]
        k, n = weight.dims
        if x not in quantised:
            p = f"pt{len(quantised)}_"
            graph.initializer.append(numpy_helper.from_array(np.array([-1, k], np.int64), p + "mk"))
            nodes += [
                make("Reshape", [x, p + "mk"], [p + "rows"]),  # [..., K] -> [M, K]
                make("Shape", [x], [p + "lead"], end=-1),  # the leading dimensions, for after
                make("ReduceMax", [p + "rows"], [p + "max0"], axes=[-1], keepdims=0),
                make("ReduceMin", [p + "rows"], [p + "min0"], axes=[-1], keepdims=0),
                make("Max", [p + "max0", "pt_0"], [p + "max"]),
                make("Min", [p + "min0", "pt_0"], [p + "min"]),
                make("Sub", [p + "max", p + "min"], [p + "range"]),
                make("Max", [p + "range", "pt_eps"], [p + "range_eps"]),
                make("Div", [p + "range_eps", "pt_255"], [p + "s"]),
                make("Div", [p + "min", p + "s"], [p + "min_s"]),
                make("Neg", [p + "min_s"], [p + "neg_min_s"]),
                make("Round", [p + "neg_min_s"], [p + "zf"]),
                make("Clip", [p + "zf", "pt_0", "pt_255"], [p + "zc"]),
                make("Cast", [p + "zc"], [p + "z"], to=TensorProto.UINT8),
                make("QuantizeLinear", [p + "rows", p + "s", p + "z"], [p + "q"], axis=0),
                make("Cast", [p + "z"], [p + "z32"], to=TensorProto.INT32),
                make("Unsqueeze", [p + "z32", "pt_axis1"], [p + "z32_column"]),
            ]
            quantised[x] = (p + "q", p + "s", p + "z32_column", p + "lead")
        q, row_scale, row_zero, lead = quantised[x]
        w = numpy_helper.to_array(weight).astype(np.float32)
        column_scale = np.abs(w).max(axis=0) / 127.0
        column_scale[column_scale == 0] = 1.0
        wq = np.clip(np.rint(w / column_scale), -127, 127).astype(np.int8)
        out, name = node.output[0], weight.name
        graph.initializer.extend(
            [
                numpy_helper.from_array(wq, name + "_pt"),
                numpy_helper.from_array(column_scale.astype(np.float32), name + "_pts"),
                numpy_helper.from_array(
                    wq.astype(np.int32).sum(axis=0).astype(np.int32), name + "_ptcol"
                ),
                numpy_helper.from_array(np.array([n], np.int64), name + "_ptn"),
            ]
        )
        nodes += [
            make("MatMulInteger", [q, name + "_pt"], [out + "_i32"]),
            make("Mul", [row_zero, name + "_ptcol"], [out + "_zc"]),
            make("Sub", [out + "_i32", out + "_zc"], [out + "_i32z"]),
            make("DequantizeLinear", [out + "_i32z", row_scale], [out + "_fs"], axis=0),
            make("Mul", [out + "_fs", name + "_pts"], [out + "_rows"]),
            make("Concat", [lead, name + "_ptn"], [out + "_shape"], axis=0),
            make("Reshape", [out + "_rows", out + "_shape"], [out]),  # [M, N] -> [..., N]
        ]
        if uses[name] == 1:
            dropped.add(name)
    del graph.node[:]
    graph.node.extend(nodes)
    kept = [t for t in graph.initializer if t.name not in dropped]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    onnx.save_model(model, str(target))
