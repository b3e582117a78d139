"""Chinese, Japanese and Korean chunks embedded a second time, by e5, and scored by it
(tasks/embed/cjk_backend.py): the vectors, the routed column, and the searches."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import numpy as np
import pytest

from tasks.core.records import Chunk
from tasks.dataset.dataset import Dataset
from tasks.dataset.schema import ROUTED_VECTOR_COLUMN, VECTOR_COLUMN, Fingerprint, chunk_rows
from tasks.embed.base import RoutedQuestions
from tasks.embed.cjk_backend import CJK_MODEL, routed_score, routes
from tasks.embed.models import DEFAULT_MODEL, get_embedder, model_info, query_embedder
from tasks.search.params import SearchParams
from tasks.search.searcher import Searcher
from tasks.text.split import SplitSettings

from .test_query import document

ROUTED = f"cjk:{DEFAULT_MODEL.removeprefix('cjk:')}"
TEXTS = [
    "To bake sourdough bread you need a starter of flour and water.",
    "防火墙决定哪些网络连接可以进入这台机器。",
    "ファイアウォールの設定を変更するには、設定ファイルを書き換えます。",
    "방화벽 규칙은 설정 파일에 적습니다.",
    "12345 -- !!",
]


def test_a_fingerprint_without_a_routed_column_records_what_it_recorded_before():
    """Datasets made before the routed column keep their fingerprint id: nothing is read or
    embedded again for it."""
    fp = Fingerprint("m", 4, 256, "{}")
    assert "routed_dimension" not in json.loads(fp.to_json())
    assert Fingerprint.from_json(fp.to_json()) == fp and fp.width == 4
    routed = Fingerprint("m", 4, 256, "{}", routed_dimension=3)
    assert Fingerprint.from_json(routed.to_json()) == routed and routed.width == 7
    assert routed.id != fp.id


def test_which_texts_are_routed():
    assert [routes(text) for text in TEXTS] == [False, True, True, True, False]
    code = (
        "第 4 章 debian 目录 > 4.1. control\n\nSource: gentoo\nSection: unknown\nPriority: optional"
    )
    assert routes(code), "a code block under a Chinese heading goes with its page"
    stray = "The Great Wall (长城) was built over many centuries to keep raiders out of the plains"
    assert not routes(stray), "a stray word does not"
    assert routed_score(0.0) == pytest.approx(0.234) and routed_score(2.0) > routed_score(1.0)


@pytest.mark.model
def test_a_routed_chunk_gets_both_vectors_and_another_chunk_the_first_alone():
    info = model_info(ROUTED)
    assert info.routed_dimension == model_info(CJK_MODEL).dimension == 384
    embedder = get_embedder(ROUTED)
    vectors = embedder.encode(TEXTS)
    assert vectors.shape == (len(TEXTS), info.dimension + info.routed_dimension)
    first, second = vectors[:, : info.dimension], vectors[:, info.dimension :]
    inner = get_embedder(ROUTED.removeprefix("cjk:")).encode(TEXTS)
    np.testing.assert_allclose(first, inner, atol=1e-5)
    assert not second[[0, 4]].any(), "no second vector for Latin text or none"
    np.testing.assert_allclose(np.linalg.norm(second[[1, 2, 3]], axis=1), 1.0, atol=1e-5)
    alone = np.stack([embedder.encode([text])[0] for text in TEXTS])
    np.testing.assert_allclose(alone, vectors, atol=1e-5)


@pytest.mark.model
def test_the_routed_column_is_empty_for_the_chunks_not_routed(tmp_path):
    """The table keeps each part in its column, the second one null where the model gave
    none; what a run reuses is the model's vector as it made it."""
    embedder = get_embedder(ROUTED)
    fp = Fingerprint.of(model_info(ROUTED), SplitSettings())
    doc = document("a.md", [("", TEXTS[0]), ("", TEXTS[1])])
    chunks = [
        Chunk("a.md:chunk:0000", "a.md", 0, 2, TEXTS[0], 0, 10, "", 0, None, text_hash="h0"),
        Chunk("a.md:chunk:0001", "a.md", 1, 2, TEXTS[1], 10, 20, "", 0, None, text_hash="h1"),
    ]
    vectors = embedder.encode([TEXTS[0], TEXTS[1]])
    rows = chunk_rows([doc], chunks, vectors, fp, datetime.now(UTC))
    assert rows.column(ROUTED_VECTOR_COLUMN).null_count == 1
    assert rows.column(ROUTED_VECTOR_COLUMN).is_null().to_pylist() == [True, False]
    dataset = Dataset(str(tmp_path / "index"))
    dataset.prepare(fp)
    dataset.write_batch([doc], chunks, vectors)
    stored = dataset.stored_vectors(["h0", "h1"])
    np.testing.assert_allclose(np.stack([stored["h0"], stored["h1"]]), vectors, atol=1e-6)
    assert dataset.chunks.schema.field(VECTOR_COLUMN).type.list_size == fp.dimension


PAGES = {
    "security.md": "# 第七章 安全\n\n## 7.2 配置防火墙\n\n"
    "防火墙决定哪些网络连接可以进入这台机器。防火墙的规则写在配置文件里，"
    "修改规则之后重新加载防火墙即可生效。\n",
    "network.md": "# 第八章 网络\n\n## 8.1 配置网络接口\n\n"
    "网络接口的地址、网关和域名服务器都写在这个文件里。修改之后重新启动网络服务即可生效。\n",
    "bread.md": "# Bread\n\nTo bake sourdough bread you need a starter of flour and water that "
    "ferments for several days before you mix the dough.\n",
}


@pytest.mark.integration
def test_chinese_chunks_are_scored_by_their_routed_vectors(prefect_backend, tmp_path):
    """A dataset of the routed model: the Chinese chunks carry e5 vectors, the English one
    none; an English question finds the Chinese section by its e5 vector alone (vector mode),
    and an English question on English chunks keeps the first model's cosine."""
    from flows.ingest import ingest

    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in PAGES.items():
        (docs / name).write_text(text, "utf-8")
    uri = str(tmp_path / "index")
    ingest(source_dir=str(docs), index_uri=uri, model=ROUTED)
    dataset = Dataset(uri)
    rows = dataset.chunks.to_arrow()
    has_routed = rows.column(ROUTED_VECTOR_COLUMN).is_valid().to_pylist()
    routed = dict(zip(rows.column("doc_id").to_pylist(), has_routed, strict=True))
    assert routed["bread.md"] is False and routed["security.md"] and routed["network.md"]
    searcher = Searcher(dataset)
    assert isinstance(searcher.embedder(), RoutedQuestions)
    assert searcher._reading(None).router is not None, "the dataset holds Chinese chunks"
    hits = searcher.search("How do I set up the firewall?", SearchParams(k=3, mode="vector"))
    assert hits[0].doc_id == "security.md"
    bread = searcher.search("How long does a sourdough starter ferment?", SearchParams(k=1))
    assert bread[0].doc_id == "bread.md"


@pytest.mark.integration
def test_a_dataset_without_routed_languages_asks_no_second_model(prefect_backend, tmp_path):
    """English documents under the routed model: no chunk is routed, the question is
    embedded by the first model alone and ranked as that model ranks it."""
    from flows.ingest import ingest

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "bread.md").write_text(PAGES["bread.md"], "utf-8")
    uri = str(tmp_path / "index")
    ingest(source_dir=str(docs), index_uri=uri, model=ROUTED)
    searcher = Searcher(Dataset(uri))
    assert searcher._reading(None).router is None
    question = "sourdough starter"
    hit = searcher.search(question, SearchParams(k=1, mode="vector"))[0]
    asked = query_embedder(model_info(ROUTED).model_id).encode([question])[0]
    stored = Dataset(uri).chunks.to_arrow().column(VECTOR_COLUMN).to_pylist()[0]
    assert hit.score == pytest.approx(float(np.dot(asked, stored)), abs=1e-5)
