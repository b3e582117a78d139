"""The scripts told apart and the language group of a text (tasks/core/scripts.py)."""

from __future__ import annotations

import pytest

from tasks.core.scripts import (
    GROUPS,
    SCRIPTS,
    dominant_script,
    is_cjk,
    language_group,
    script_counts,
    script_of,
)


@pytest.mark.parametrize(
    ("text", "script", "group"),
    [
        ("Ownership is a set of rules that govern memory.", "latin", "latin"),
        ("Crème brûlée, Straße, façade: élan.", "latin", "latin"),
        ("apt-file 是一个在软件包中查找文件的工具。", "han", "chinese"),
        ("東京は日本の首都です。", "han", "japanese"),
        ("ラーメンをください", "kana", "japanese"),
        ("서울은 한국의 수도입니다.", "hangul", "korean"),
        ("Москва — столица России.", "cyrillic", "cyrillic"),
        ("Η Αθήνα είναι η πρωτεύουσα της Ελλάδας.", "other", "other"),
        ("القاهرة هي عاصمة مصر", "other", "other"),
        ("3.14 + 2,718 = 5.858 !!", None, "no_letters"),
        ("", None, "no_letters"),
    ],
)
def test_a_sentence_in_each_script(text, script, group):
    assert dominant_script(text) == script
    assert language_group(text) == group


def test_letters_are_counted_per_script_and_only_letters_count():
    assert script_counts("Rust 的所有权 rules, 2024!") == {"latin": 9, "han": 4}
    assert script_counts("ラーメン") == {"kana": 4}  # ー, the prolonged sound mark, is kana
    assert script_counts("𠀀𠀁") == {"han": 2}  # beyond the BMP (CJK Extension B)
    assert script_counts("12 + 34 = 46 ¶ ✓ 🙂") == {}


def test_the_most_letters_decide_and_any_kana_makes_han_japanese():
    assert language_group("漢字 and a few English words") == "latin"
    assert language_group("用 cargo build 编译整个项目的所有代码和依赖") == "chinese"
    assert script_counts("日本語の文章") == {"han": 5, "kana": 1}
    assert language_group("日本語の文章") == "japanese"
    assert language_group("한국어 漢字") == "korean"
    assert dominant_script("abcdef 中文") == "han"  # a tie goes to the first of SCRIPTS
    assert dominant_script("abcdefg 中文") == "latin"
    # A CJK character weighs three letters: a Chinese sentence with English names is Chinese.
    mixed = "Internet2是由研究和教育界成员领导的美国计算机网络联盟，与 Qwest 建立了 Abilene 网络。"
    assert script_counts(mixed)["latin"] > script_counts(mixed)["han"] / 2
    assert language_group(mixed) == "chinese"


def test_every_script_has_a_group():
    for text in ["中", "か", "한", "a", "я", "λ"]:
        assert dominant_script(text) in SCRIPTS
        assert language_group(text) in GROUPS


def test_one_characters_script_and_whether_it_is_cjk_text():
    assert [script_of(c) for c in "a中かカー한я1 "] == [
        *["latin", "han", "kana", "kana", "kana", "hangul", "cyrillic", None, None]
    ]
    assert script_of("λ") == "other"
    # CJK text: the three scripts, CJK punctuation and full-width forms; not Latin, spaces
    assert all(is_cjk(c) for c in "中かカー한。、「」！（１ａ𠀀")
    assert not any(is_cjk(c) for c in "a1 .,!é")
