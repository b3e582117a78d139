"""Embedders: the hashing test double and the bundled sentence-transformers model."""

from __future__ import annotations

import numpy as np
import pytest

from tasks.embed.base import token_length_groups
from tasks.embed.hash_backend import HashEmbedder
from tasks.embed.models import (
    DEFAULT_MODEL_ID,
    get_embedder,
    model_info,
    model_spec_for,
    token_counter,
)


def test_hash_embedder_is_deterministic_unit_and_discriminating():
    embedder = HashEmbedder(64)
    texts = ["alpha beta", "alpha beta", "alpha  beta", "gamma", ""]
    vectors = embedder.encode(texts)
    assert vectors.shape == (5, 64) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert np.array_equal(vectors[0], vectors[1])
    assert not np.array_equal(vectors[0], vectors[2]), "spacing changes the text, so the vector"
    assert not np.array_equal(vectors[0], vectors[3])
    assert np.isfinite(vectors[4]).all(), "the empty string still gets a unit vector"
    assert embedder.encode([]).shape == (0, 64)


def test_embedders_are_created_once_per_process():
    assert get_embedder("hash:32") is get_embedder("hash:32")
    assert get_embedder("hash:32").info.dimension == 32


@pytest.mark.model
def test_bundled_model_encodes_normalised_384d_vectors():
    embedder = get_embedder()
    assert embedder.info.model_id == DEFAULT_MODEL_ID
    assert model_spec_for(embedder.info.model_id) == "all-MiniLM-L6-v2"
    assert (embedder.info.dimension, embedder.info.max_tokens) == (384, 256)
    assert model_info("all-MiniLM-L6-v2") == embedder.info, "read without loading: the same"
    vectors = embedder.encode(
        ["How do I borrow a value in Rust?", "Borrowing a value with a reference", "苹果派的做法"]
    )
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]


def test_token_length_groups_hold_neighbouring_token_counts():
    counts = [12, 250, 3, 240, 12, 90, 255]
    groups = token_length_groups(counts, size=3)
    assert groups == [[6, 1, 3], [5, 0, 4], [2]]
    assert token_length_groups([], size=3) == []


@pytest.mark.model
def test_bundled_model_encodes_in_token_length_groups_in_input_order():
    """Code is short in characters but long in tokens: grouping goes by tokens, and the
    vectors come back in input order, equal to the library's own encode."""
    embedder = get_embedder()
    code = 'fn main(){let v:Vec<i32>=vec![1,2,3];println!("{:?}",v.iter().map(|x|x*2));}'
    prose = "The borrow checker compares scopes to determine whether all borrows are valid. "
    texts = [prose * 2, "short", code * 3, prose, code, "a" * 5, prose * 3]
    groups = []
    original = embedder._encode_group
    try:
        embedder._encode_group = lambda group: groups.append(group) or original(group)
        vectors = embedder.encode(texts * 20)  # 140 texts: three forward passes of up to 64
    finally:
        del embedder._encode_group
    counts = embedder.count_tokens(texts * 20)
    assert [len(group) for group in groups] == [64, 64, 12]
    flat = [counts[texts.index(text)] for group in groups for text in group]
    assert flat == sorted(flat, reverse=True), "each forward pass holds neighbouring token counts"
    library = embedder.model.encode(texts * 20, batch_size=64, normalize_embeddings=True)
    assert vectors.shape == (140, 384)
    assert np.abs(vectors - library).max() < 1e-5


@pytest.mark.model
def test_token_counts_use_the_models_tokenizer():
    embedder = get_embedder()
    texts = ["hello world", "word " * 300, "這是中文 mixed with code: fn main() {}"]
    short, long, _ = embedder.count_tokens(texts)
    assert short == 4  # [CLS] hello world [SEP]
    assert long == 302
    assert token_counter("all-MiniLM-L6-v2")(texts) == embedder.count_tokens(texts), (
        "splitting counts with the tokenizer file alone, exactly as the model does"
    )
    with pytest.raises(ValueError):
        get_embedder("hash:notanumber")


@pytest.mark.model
@pytest.mark.parametrize(("spec", "min_cosine"), [("onnx", 0.999), ("onnx-int8", 0.98)])
def test_onnx_backends_agree_with_torch(spec, min_cosine):
    texts = [
        "Ownership is a set of rules that govern how a Rust program manages memory.",
        "A virtual environment is a self-contained directory tree.",
        "这是一个测试句子。",
        "short",
        "",
    ]
    reference = get_embedder().encode(texts)
    onnx = get_embedder(f"{spec}:all-MiniLM-L6-v2")
    vectors = onnx.encode(texts)
    assert vectors.shape == (5, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # Sentences; a one-word or empty text (only [CLS] [SEP]) drifts most under int8 (~0.975).
    assert (vectors[:3] * reference[:3]).sum(axis=1).min() >= min_cosine
    assert onnx.count_tokens(texts) == get_embedder().count_tokens(texts)
    assert onnx.info.model_id.startswith(DEFAULT_MODEL_ID + "+onnx-")
    assert model_spec_for(onnx.info.model_id) == f"{spec}:all-MiniLM-L6-v2"
    assert model_info(f"{spec}:all-MiniLM-L6-v2") == onnx.info
