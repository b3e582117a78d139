"""Embedders: the hashing test double and the bundled sentence-transformers model."""

from __future__ import annotations

import numpy as np
import pytest

from tasks.embed import DEFAULT_MODEL_ID, HashEmbedder, get_embedder, model_spec_for


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
    assert get_embedder("hash:32").dimension == 32


def test_bundled_model_encodes_normalised_384d_vectors():
    embedder = get_embedder()
    assert embedder.model_id == DEFAULT_MODEL_ID
    assert model_spec_for(embedder.model_id) == "all-MiniLM-L6-v2"
    assert (embedder.dimension, embedder.max_tokens) == (384, 256)
    vectors = embedder.encode(
        ["How do I borrow a value in Rust?", "Borrowing a value with a reference", "苹果派的做法"]
    )
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]


def test_token_counts_use_the_models_tokenizer():
    embedder = get_embedder()
    short, long = embedder.count_tokens(["hello world", "word " * 300])
    assert short == 4  # [CLS] hello world [SEP]
    assert long == 302
    with pytest.raises(ValueError):
        get_embedder("hash:notanumber")


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
    assert onnx.model_id.startswith(DEFAULT_MODEL_ID + "+onnx-")
    assert model_spec_for(onnx.model_id) == f"{spec}:all-MiniLM-L6-v2"
