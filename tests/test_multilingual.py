"""Questions across languages through the real flow: the default (dual) model finds an English
paragraph for a Chinese question and a Chinese paragraph for an English one, in vector mode
and in the default (hybrid) mode; a dataset of the previous default still answers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tasks.dataset.dataset import Dataset
from tasks.dataset.schema import VECTOR_COLUMN
from tasks.embed.base import CrossScriptRescorer, RoutedQuestions
from tasks.embed.models import DEFAULT_MODEL, ENGLISH_MODEL, model_info
from tasks.search.fusion import ENGLISH_FUSION, ROUTED_FUSION
from tasks.search.info import index_stats
from tasks.search.params import SearchParams
from tasks.search.searcher import Searcher

pytestmark = pytest.mark.integration

PARAGRAPHS = {
    "en/lighthouse.md": "Lighthouse keepers trimmed the lamp wicks every evening and polished "
    "the lens so that ships could see the light from far out at sea.",
    "en/bread.md": "To bake sourdough bread you need a starter of flour and water that "
    "ferments for several days before you mix the dough.",
    "en/bees.md": "Honey bees tell other workers the direction and distance of flowers by "
    "performing a waggle dance inside the hive.",
    "en/volcano.md": "A volcano erupts when pressure from molten rock and gases beneath the "
    "surface forces magma up through the crust.",
    "zh/taichi.md": "太极拳是一种缓慢而柔和的中国传统武术，"
    "练习者通过呼吸和动作的配合来锻炼身体、放松心情。",
    "zh/tea.md": "绿茶的冲泡水温不宜过高，一般用八十度左右的水，"
    "浸泡两三分钟，茶叶的香气就会释放出来。",
    "zh/panda.md": "大熊猫主要生活在中国四川的山林中，它们几乎只吃竹子，每天要花十几个小时进食。",
    "zh/train.md": "高速铁路列车的运行速度可以超过每小时三百公里，大大缩短了城市之间的旅行时间。",
}
TITLES = {
    "zh/taichi.md": "太极拳",
    "zh/tea.md": "绿茶",
    "zh/panda.md": "熊猫",
    "zh/train.md": "高铁",
}
# Question → the file that answers it, always in the other language.
ACROSS = {
    "蜜蜂是如何告诉同伴花在哪里的？": "en/bees.md",
    "火山为什么会喷发？": "en/volcano.md",
    "灯塔看守人每天晚上做什么？": "en/lighthouse.md",
    "What do giant pandas eat?": "zh/panda.md",
    "What water temperature should I use to brew green tea?": "zh/tea.md",
    "How fast do high-speed trains run?": "zh/train.md",
}


def _corpus(folder: Path) -> Path:
    for relative, text in PARAGRAPHS.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {TITLES.get(relative, path.stem)}\n\n{text}\n", "utf-8")
    return folder


@pytest.fixture(scope="module")
def multilingual_index(prefect_backend, tmp_path_factory) -> str:
    from flows.ingest import ingest

    folder = tmp_path_factory.mktemp("multilingual")
    uri = str(folder / "index")
    summary = ingest(source_dir=str(_corpus(folder / "docs")), index_uri=uri)  # --model auto
    assert summary.indexed == len(PARAGRAPHS)
    return uri


@pytest.mark.parametrize("mode", ["vector", None])
def test_a_question_finds_its_paragraph_in_the_other_language(multilingual_index, mode):
    searcher = Searcher(Dataset(multilingual_index))
    assert searcher.dataset.fingerprint.model == model_info(DEFAULT_MODEL).model_id
    assert searcher.resolve_mode(mode) == (mode or "hybrid")
    questions = list(ACROSS)
    found = searcher.search_many(questions, SearchParams(k=3, mode=mode, per_doc=True))
    for question, hits in zip(questions, found, strict=True):
        assert hits and hits[0].doc_id == ACROSS[question], (question, [h.doc_id for h in hits])


def test_chunks_in_the_other_script_are_rescored_by_their_best_sentence(multilingual_index):
    """In vector mode a Chinese question's English candidates score their cosine plus their
    best sentence's bonus; its Chinese candidates are the ones e5 ranks (their score from
    e5's: tests/test_cjk_routing.py); best first."""
    searcher = Searcher(Dataset(multilingual_index))
    question = "火山为什么会喷发？"
    hits = searcher.search(question, SearchParams(k=len(PARAGRAPHS), mode="vector"))
    assert len(hits) == len(PARAGRAPHS) and hits[0].doc_id == "en/volcano.md"
    rescorer = searcher.embedder()
    assert isinstance(rescorer, CrossScriptRescorer) and isinstance(rescorer, RoutedQuestions)
    asked = rescorer.encode([question])[0]
    table = searcher.dataset.chunks.to_arrow().select(["chunk_id", VECTOR_COLUMN]).to_pylist()
    stored = {row["chunk_id"]: np.asarray(row[VECTOR_COLUMN]) for row in table}
    for hit in hits:
        if hit.doc_id.startswith("zh/"):
            assert rescorer.routes(f"{hit.section}\n\n{hit.text}"), hit
            continue
        cosine = float(stored[hit.chunk_id] @ asked)
        bonus = float(rescorer.cross_script_bonus(question, [hit.text])[0])
        assert bonus != 0.0, hit
        assert hit.score == pytest.approx(cosine + bonus, abs=1e-4), hit
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)


def test_stats_and_fusion_of_a_multilingual_dataset(multilingual_index):
    searcher = Searcher(Dataset(multilingual_index))
    assert searcher.fusion() is ROUTED_FUSION
    assert index_stats(searcher)["languages"] == {"latin": 0.5, "chinese": 0.5}


def test_a_dataset_of_the_previous_default_still_answers(prefect_backend, tmp_path):
    """Built with the English-only default before this one: searched with its own model and
    the fusion it was tuned with; `--model auto` keeps updating it with that model."""
    from flows.ingest import ingest

    corpus, uri = _corpus(tmp_path / "docs"), str(tmp_path / "index")
    ingest(source_dir=str(corpus), index_uri=uri, model=ENGLISH_MODEL)
    (corpus / "en" / "bees.md").write_text("# bees\n\nBees make honey from nectar.\n", "utf-8")
    again = ingest(source_dir=str(corpus), index_uri=uri)  # --model auto keeps it
    assert (again.indexed, again.unchanged) == (1, len(PARAGRAPHS) - 1)
    searcher = Searcher(Dataset(uri))
    assert searcher.dataset.fingerprint.model == model_info(ENGLISH_MODEL).model_id
    assert searcher.fusion() is ENGLISH_FUSION
    hits = searcher.search("What causes a volcano to erupt?", SearchParams(k=1))
    assert hits[0].doc_id == "en/volcano.md"


class _CountingEncoder:
    """An encoder that records the texts it is asked to encode."""

    def __init__(self, inner):
        self.inner, self.info, self.asked = inner, inner.info, []

    def encode(self, texts):
        self.asked.append(list(texts))
        return self.inner.encode(texts)


def test_sentence_vectors_are_kept_by_sentence_so_shared_ones_are_encoded_once(
    multilingual_index,
):
    """The cross-script re-scoring keeps sentence vectors by sentence: two chunks that share
    a sentence (overlapping chunks do) encode it once, a later chunk only its new sentences;
    the bonus is the one a fresh process gives."""
    from tasks.embed.dual_backend import DualEmbedder, DualQuestions

    documents = Searcher(Dataset(multilingual_index)).embedder().inner.documents
    counting = _CountingEncoder(documents.multilingual)
    rescorer = DualQuestions(DualEmbedder(documents.english, counting))
    question = "蜜蜂如何跳舞？"
    rescorer.encode([question])
    counting.asked.clear()
    first = [
        "Bees dance in the hive. The hive is warm.",
        "Bees dance in the hive. Flowers are far.",
    ]
    bonus = rescorer.cross_script_bonus(question, first)
    assert counting.asked == [["Bees dance in the hive.", "The hive is warm.", "Flowers are far."]]
    later = rescorer.cross_script_bonus(question, ["Bees dance in the hive. Ants march."])
    assert counting.asked[1:] == [["Ants march."]]
    fresh = DualQuestions(documents)
    assert bonus == pytest.approx(fresh.cross_script_bonus(question, first), abs=1e-5)
    assert later == pytest.approx(
        fresh.cross_script_bonus(question, ["Bees dance in the hive. Ants march."]), abs=1e-5
    )
    assert bonus.min() > 0 and later[0] > 0


# Chinese pages sharing an English identifier: the page about it names it in a heading; an
# unrelated page holds it in a code block, where the full-text list finds it first.
IDENTIFIER_PAGES = {
    "apt.md": "# 第六章 软件包管理\n\n## 6.1 编辑 sources.list 文件\n\n"
    "系统从哪些镜像下载软件包，由这个文件中的每一行决定。每行先写软件包的类型，"
    "再写镜像的地址、发行版代号和组件。修改之后需要刷新软件包索引，新的镜像才会生效。\n",
    "backup.md": "# 第九章 备份\n\n## 9.3 每天的备份脚本\n\n"
    "下面的脚本把重要的配置文件复制到备份目录，每天由定时任务运行一次。\n\n"
    "```\ncp /etc/fstab /backup/\ncp /etc/apt/sources.list /backup/\ncp /etc/hosts /backup/\n```\n",
    "network.md": "# 第八章 网络配置\n\n## 8.1 配置 interfaces 文件\n\n"
    "网络接口的地址、网关和域名服务器都写在这个文件里。修改之后重新启动网络服务即可生效。\n",
}


def test_an_english_question_finds_the_chinese_page_about_an_identifier(prefect_backend, tmp_path):
    """The identifier is in both pages; the code block of the unrelated one leads the
    full-text list, yet the default mode answers with the page that is about it (a dataset
    of the English model alone answers with the code block, in every mode)."""
    from flows.ingest import ingest

    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in IDENTIFIER_PAGES.items():
        (docs / name).write_text(text, "utf-8")
    uri = str(tmp_path / "index")
    ingest(source_dir=str(docs), index_uri=uri)
    searcher = Searcher(Dataset(uri))
    question = "How do I edit sources.list to choose a mirror?"
    by_text = searcher.search(question, SearchParams(k=3, mode="fts"))
    assert by_text[0].doc_id == "backup.md", "the code block leads the full-text list"
    assert searcher.search(question, SearchParams(k=3))[0].doc_id == "apt.md"
