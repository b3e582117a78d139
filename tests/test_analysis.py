"""The full-text analyser: what each kind of text turns into, and that LanceDB's whitespace
index finds it again."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import regex
import rjieba

from tasks.text import analysis
from tasks.text.analysis import query_text, search_text
from tasks.text.analysis import terms as analyse

from .commands import run_module

ROOT = Path(__file__).resolve().parents[1]

# --- Chinese ------------------------------------------------------------------------------


def test_chinese_is_segmented_into_dictionary_words():
    terms = analyse("黑豹队的防守只丢了308分，在联赛中排名第六。")
    assert {"黑豹", "防守", "联赛", "排名", "308"} <= set(terms)
    assert "黑豹队的防守只丢了" not in terms  # the whole run is no longer one term


def test_chinese_punctuation_is_dropped():
    assert analyse("，。！？“”《》、；：（）【】…—") == []
    assert all(t.isalnum() for t in analyse("他说：“你好！”（测试）"))


def test_question_terms_are_found_among_document_terms():
    doc = set(analyse("黑豹队的防守只丢了 308分，在联赛中排名第六。"))
    question = query_text("黑豹队的防守丢了多少分？").split()
    assert {"黑豹", "防守", "丢"} <= set(question) & doc


def test_traditional_and_fullwidth_forms():
    assert analyse("ＡＢＣ１２３") == ["abc123"]  # NFKC: full-width Latin and digits
    assert "臺灣" in "".join(analyse("臺灣"))  # traditional characters survive


# --- Japanese -----------------------------------------------------------------------------


def test_japanese_is_segmented_into_words_in_their_dictionary_form():
    question = query_text("東京都に住んでいます").split()
    assert {"東京", "住む"} <= set(question)  # 住んで → 住む
    assert not {"に", "で", "ます", "んで", "いま"} & set(question)  # particles, auxiliaries
    assert analyse("コーヒーを飲みました")[:2] == ["コーヒー", "飲む"]  # katakana word whole


def test_japanese_question_with_other_inflections_matches_its_passage():
    doc = set(analyse("所有権を移さずに値を借りることができます。"))
    question = set(query_text("値を借りたいときは所有権を移しますか").split())
    assert {"値", "借りる", "所有", "権", "移す"} <= question & doc


def test_japanese_spelling_variants_and_half_width_katakana_meet():
    assert query_text("サーバの設定") == query_text("サーバーの設定") == "サーバー 設定"
    assert analyse("ﾃﾞｰﾀﾍﾞｰｽを使う") == analyse("データベースを使う")
    assert "データベース" in analyse("ﾃﾞｰﾀﾍﾞｰｽ")  # voicing marks composed, not dropped


def test_katakana_middle_dot_separates_words():
    assert analyse("ジョン・スミス") == ["ジョン", "スミス"]


def test_a_particle_after_a_latin_word_is_not_a_term():
    assert analyse("pip でインストールします")[:2] == ["pip", "インストール"]
    assert analyse("「pip」で入れる")[:2] == ["pip", "入れる"]


def test_kanji_alone_goes_through_jieba_as_chinese():
    assert analyse("例外処理") == rjieba.cut("例外処理")  # no kana: jieba's cut, as before
    # ... which the Japanese passage's index terms hold too, beside Sudachi's words
    doc = analyse("例外はexceptブロックで処理します")
    assert {"例外", "処理"} <= set(doc)
    assert set(query_text("例外処理").split()) <= set(doc)


def test_a_japanese_question_gets_sudachis_words_only():
    assert "京都" in search_text("東京都に住んでいます").split()  # jieba: 東 / 京都
    assert "京都" not in query_text("東京都に住んでいます").split()


def test_japanese_punctuation_joins_one_stretch_but_chinese_keeps_its_runs():
    assert query_text("東京都、大阪府に住む") == "東京 都 大阪 府 住む"
    assert analyse("他说「你好」。我们在北京大学学习") == [
        *rjieba.cut("他说"),
        *rjieba.cut("你好"),
        *rjieba.cut("我们在北京大学学习"),
    ]


def test_a_japanese_stretch_longer_than_sudachi_takes_is_cut_between_sentences():
    terms = analyse("東京に住む。" * 6000)  # 36,000 characters, over 100 kB in UTF-8
    assert terms.count("住む") == 6000


# --- Korean -------------------------------------------------------------------------------


def test_hangul_words_become_overlapping_pairs():
    assert analyse("학교에서") == ["학교", "교에", "에서"]
    assert analyse("한") == ["한"]


def test_hangul_pairs_do_not_cross_spaces():
    assert analyse("한국 사람") == ["한국", "사람"]


def test_korean_question_with_another_ending_shares_pairs_with_its_passage():
    doc = set(analyse("형태소 분석기를 사용하면 문장을 단어로 나눌 수 있습니다."))
    question = set(query_text("형태소 분석기는 어떻게 사용하나요").split())
    assert {"형태", "태소", "분석", "석기", "사용", "용하"} <= question & doc


def test_a_particle_after_a_latin_word_or_number_stays_its_own_run():
    assert analyse("pip을 설치합니다") == ["pip", "을", "설치", "치합", "합니", "니다"]
    assert analyse("8080으로") == ["8080", "으로"]


def test_hangul_is_not_decomposed_into_jamo():
    terms = analyse("형태소 분석기를 사용했습니다")
    assert terms and all(regex.fullmatch(r"[\uAC00-\uD7A3]{2}", t) for t in terms)


# --- loading and threads ------------------------------------------------------------------


def test_english_chinese_and_korean_never_load_sudachi_or_kiwi():
    code = """
import json, sys
from tasks.text import analysis
analysis.warm_up()
analysis.query_text("How do I use HashMap? 如何使用哈希表 한국어 형태소 분석기를 사용합니다")
before = [m in sys.modules for m in ("sudachipy", "kiwipiepy")]
analysis.terms("東京です")
print(json.dumps([before, [m in sys.modules for m in ("sudachipy", "kiwipiepy")]]))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert json.loads(out.stdout) == [[False, False], [True, False]]


def test_japanese_and_korean_analysis_from_several_threads():
    # Sudachi raises if one tokenizer is used by two threads at once: each has its own.
    texts = [
        "東京都に住んでいます。" * 20,
        "所有権を移さずに値を借りることができます。" * 20,
        "한국어 형태소 분석기를 사용합니다.",
        "서울에 살고 있으며 지하철을 타고 다닙니다.",
    ] * 50
    expected = [analyse(text) for text in texts]
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(analyse, texts)) == expected


# --- mixed --------------------------------------------------------------------------------


def test_mixed_chinese_and_english():
    terms = analyse("Python的HashMap很快, running fast")
    assert terms == ["python", "的", "hashmap", "hash", "map", "很快", "run", "fast"]


def test_mixed_scripts_split_at_script_boundaries():
    assert analyse("iPhone手机") == ["iphon", "phone", "手机"]
    assert analyse("abc한국어") == ["abc", "한국", "국어"]


# --- code identifiers ---------------------------------------------------------------------


def test_camel_case_is_kept_whole_and_split():
    assert analyse("HashMap") == ["hashmap", "hash", "map"]
    assert analyse("XMLHttpRequest") == ["xmlhttprequest", "xml", "http", "request"]
    assert analyse("base64Encode") == ["base64encode", "base64", "encod"]


def test_snake_case_is_kept_whole_and_split():
    assert analyse("snake_case_name") == ["snake_case_name", "snake", "case", "name"]
    assert analyse("__init__") == ["init"]


def test_path_separators_keep_the_whole_and_all_parts():
    assert analyse("std::collections::HashMap") == [
        "std::collections::hashmap",
        "std",
        "collect",
        "hashmap",
        "hash",
        "map",
    ]
    assert analyse("std::collections") == ["std::collections", "std", "collect"]


def test_searching_an_identifier_or_its_words_both_match():
    doc = set(analyse("let cache: HashMap<String, usize> = HashMap::new();"))
    assert set(query_text("HashMap").split()) <= doc
    assert set(query_text("hash map").split()) <= doc


def test_plural_acronyms_and_gene_names_are_not_cut_up():
    assert analyse("URLs") == ["url"]
    assert analyse("p53 HNF4A H3K9me3") == ["p53", "hnf4a", "h3k9me3"]


def test_cpp_and_csharp_keep_their_suffix():
    assert analyse("C++ and C#") == ["c++", "c", "c#", "c"]


def test_prose_compounds_give_their_parts_only():
    assert analyse("covid-19 and/or e.g.") == ["covid", "19", "e", "g"]


# --- accents, case, stemming, stop words --------------------------------------------------


def test_accents_are_folded_on_latin_letters():
    assert analyse("Crème brûlée") == ["creme", "brule"]
    assert analyse("ÅNGSTRÖM") == ["angstrom"]
    assert analyse("Straße Øresund Łódź") == ["strass", "oresund", "lodz"]
    assert analyse("naïve") == analyse("naive")


def test_other_alphabets_are_lowercased_but_keep_their_letters():
    assert analyse("ПРИВЕТ мир") == ["привет", "мир"]
    assert analyse("ΕΛΛΗΝΙΚΆ") == ["ελληνικά"]


def test_english_stemming_and_stop_words():
    assert analyse("The running dogs are quickly jumping") == ["run", "dog", "quick", "jump"]
    assert analyse("the and of to") == []
    # removed before stemming (LanceDB removes after, so these slip through there)
    assert analyse("only very why") == []


# --- numbers ------------------------------------------------------------------------------


def test_numbers_are_terms():
    assert analyse("308 points in 2016") == ["308", "point", "2016"]
    assert analyse("1,000,000 people") == ["1000000", "peopl"]
    assert analyse("1,2,3") == ["1", "2", "3"]


def test_decimal_numbers_are_kept_whole_and_split():
    assert analyse("pi is 3.14") == ["pi", "3.14", "3", "14"]
    assert analyse("10.0.0.1")[0] == "10.0.0.1"


def test_fractions_do_not_glue_onto_numbers():
    assert analyse("6½ sacks")[0] == "6"


# --- output contract ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["", "   ", "\n\t", "!!!", "東京は日本の首都です", "HashMap<K, V>", "x" * 200, "a_" * 50 + "b"],
)
def test_terms_have_no_whitespace_and_bounded_length(text):
    terms = analyse(text)
    assert all(t and not any(c.isspace() for c in t) for t in terms)
    assert all(len(t) <= analysis.MAX_TERM_CHARS for t in terms)
    assert search_text(text).split() == terms


def test_query_text_lists_each_term_once():
    assert query_text("cat cat dog Cat") == "cat dog"
    assert search_text("cat cat dog") == "cat cat dog"


# --- LanceDB round trip --------------------------------------------------------------------


def test_lancedb_whitespace_index_finds_analysed_text(tmp_path):
    import lancedb
    from lancedb.index import FTS
    from lancedb.query import MatchQuery

    from tasks.dataset.upkeep import FULL_TEXT_INDEX

    docs = {
        "zh": "黑豹队的防守只丢了 308分，在联赛中排名第六。",
        "code": "Use std::collections::HashMap for a snake_case_name lookup.",
        "ja": "東京は日本の首都です。",
        "ko": "학교에서 공부합니다.",
        "en": "The Panthers defense gave up just 308 points.",
    }
    table = lancedb.connect(tmp_path).create_table(
        "chunks", [{"doc": k, "text": v, "search_text": search_text(v)} for k, v in docs.items()]
    )
    table.create_index("text", config=FTS())  # today's index, left as it is
    table.create_index("search_text", config=FULL_TEXT_INDEX)
    assert {"text_idx", "search_text_idx"} <= {index.name for index in table.list_indices()}

    def top(question: str) -> str:
        query = MatchQuery(query_text(question), "search_text")
        rows = table.search(query, query_type="fts").select(["doc", "_score"]).limit(1).to_list()
        return rows[0]["doc"] if rows else ""

    assert top("黑豹队的防守丢了多少分？") == "zh"
    assert top("hash map") == "code"
    assert top("HashMap") == "code"
    assert top("snake case name") == "code"
    assert top("日本の首都") == "ja"
    assert top("首都") == "ja"  # kanji alone: jieba's words, which the index holds too
    assert top("학교") == "ko"
    assert top("학교에서 공부했어요") == "ko"
    assert top("How many points did the defense give up?") == "en"
    assert top('"quoted" (parens) AND -minus +plus') == ""  # no parser: no error, no match


def test_dotless_and_dotted_i_and_loose_diacritics():
    assert analyse("İstanbul") == analyse("istanbul")
    assert analyse("молоко́") == ["молоко"]
    assert analyse("हिन्दी") == ["हिन्दी"]  # Devanagari signs (virama) are kept


def test_the_analyser_benchmark_runs_in_its_smoke_mode():
    """benchmarks/analysers.py keeps running: its smoke mode prints the table for both
    languages and the chosen analysers (a script that stopped running would fail here)."""
    result = run_module("benchmarks.analysers", "--smoke", timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [line.split() for line in result.stdout.splitlines()]
    chosen = {row[0]: row[2] for row in rows if len(row) > 2 and row[1] == "*"}
    assert chosen == {"ja": "sudachi-A-normalized+index-jieba", "ko": "pairs"}, result.stdout
