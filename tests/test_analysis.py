"""The full-text analyser: what each kind of text turns into, and that LanceDB's whitespace
index finds it again."""

from __future__ import annotations

import pytest

from tasks.text import analysis
from tasks.text.analysis import query_text, search_text
from tasks.text.analysis import terms as analyse

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


def test_kana_runs_become_bigrams():
    assert analyse("カタカナ") == ["カタ", "タカ", "カナ"]
    assert analyse("コーヒー") == ["コー", "ーヒ", "ヒー"]  # the prolonged sound mark stays


def test_japanese_sentence_mixes_han_words_and_kana_bigrams():
    terms = analyse("東京は日本の首都です。")
    assert {"東京", "日本", "首都", "は", "の", "です"} <= set(terms)


def test_kana_voicing_marks_are_not_folded_away():
    assert analyse("がぎ") == ["がぎ"]
    assert analyse("ｶﾞｷﾞ") == ["ガギ"]  # half-width katakana is normalised, marks composed


def test_katakana_middle_dot_separates_words():
    assert analyse("カタ・カナ") == ["カタ", "カナ"]


# --- Korean -------------------------------------------------------------------------------


def test_hangul_words_become_bigrams():
    assert analyse("학교에서") == ["학교", "교에", "에서"]
    assert analyse("한") == ["한"]


def test_hangul_bigrams_do_not_cross_spaces():
    assert analyse("한국 사람") == ["한국", "사람"]


def test_hangul_is_not_decomposed_into_jamo():
    assert all(len(t) == 2 for t in analyse("형태소 분석기"))


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

    from tasks.dataset.dataset import FULL_TEXT_INDEX

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
    assert top("학교") == "ko"
    assert top("How many points did the defense give up?") == "en"
    assert top('"quoted" (parens) AND -minus +plus') == ""  # no parser: no error, no match


def test_dotless_and_dotted_i_and_loose_diacritics():
    assert analyse("İstanbul") == analyse("istanbul")
    assert analyse("молоко́") == ["молоко"]
    assert analyse("हिन्दी") == ["हिन्दी"]  # Devanagari signs (virama) are kept
