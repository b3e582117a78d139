"""Japanese and Korean full text: character pairs against morphological analysers.

    .venv/bin/python -m benchmarks.analysers [--smoke]

There is no Japanese or Korean dev set, so benchmarks/data/cjk_questions.json holds short
passages written for this (software documentation and everyday topics, 52 per language, and
20 distractor passages on the same topics), each with one question phrased differently
(inflected verbs and adjectives, other particles, other word order), and for some a keyword
query as typed in a search box (nouns; kanji only in Japanese). Every query is ranked
against all passages of its language by a plain BM25 (k1 1.2, b 0.75, as LanceDB's full-text
search; a passage scoring the same as the right one counts as ahead of it) over the terms
each analyser gives (`tasks.text.analysis.terms` for the passages, `query_text` for the
queries, with the Japanese or Korean part swapped for each variant; Chinese, English and code
are analysed as in the module).

Prints MRR@10 and top-1 accuracy per analyser for the questions and the keyword queries, the
analysis speed (characters of the passages per second, warm, one thread, best of several
rounds), the first-use load time of each dictionary, the terms given for a few sentences,
and one JSON line.

Variants: `pairs` is the analyser before Sudachi (VERSION 1: Han runs through jieba, kana and
Hangul runs as overlapping character pairs), which the module keeps for Korean.
`sudachi-<mode>-<form>` splits a Japanese stretch with
Sudachi in split mode A, B or C and takes each morpheme's normalized form, dictionary form or
surface, dropping particles, auxiliaries, conjunctions and punctuation (`+particles` keeps
particles, auxiliaries and conjunctions; `AC` gives mode C's words and also their mode-A
parts); `+index-jieba` also indexes jieba's words of the stretch's kanji runs (not the
query's), `+jieba` does so on both sides. `kiwi-*` analyses a Korean stretch (Hangul words
and the spaces and punctuation between them) with Kiwi (kiwipiepy and kiwipiepy-model, in the
dev extra; the module does not use it), its model without the typo and multi-word
dictionaries, keeping content morphemes with verb and adjective stems in their dictionary
form (`content`), everything but symbols (`all`), without reading the letter a stretch is
glued to (`-unglued`), or with the typo and multi-word dictionaries loaded (`+dicts`). Without
kiwipiepy the kiwi rows are skipped, with a line saying so. The module's own choice is marked
with *.

`--smoke` runs the first 8 items of each language (no distractors) with pairs, the module's
and `kiwi-content`, in a few seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import sys
import time
import unicodedata
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import regex

from tasks.text import analysis

DATA = Path(__file__).resolve().parent / "data" / "cjk_questions.json"
KO_DOCS = Path(__file__).resolve().parent / "data" / "ko-docs"  # a Korean page-finding set
K1, B = 1.2, 0.75
DEPTH = 10

Segmenter = Callable[..., list[str]]
JAPANESE, TERMS = analysis._japanese, analysis.terms  # the module's own, before any swap

# --- the analyser before: character pairs ----------------------------------------------------

_V1_RUNS = regex.compile(r"(?P<han>\p{Han}+)|(?P<kana>[\p{Hiragana}\p{Katakana}ー]+)")


def _pairs(run: str) -> list[str]:
    return [run] if len(run) < 2 else [run[i : i + 2] for i in range(len(run) - 1)]


def pairs_japanese(stretch: str, before: str = "") -> list[str]:
    """VERSION 1: Han runs through jieba, kana runs as overlapping pairs."""
    found: list[str] = []
    for match in _V1_RUNS.finditer(stretch):
        run = match.group()
        found.extend(analysis._segment()(run) if match.lastgroup == "han" else _pairs(run))
    return found


# --- other variants --------------------------------------------------------------------------


def sudachi_ac(stretch: str, before: str = "") -> list[str]:
    """Mode C's words, and the mode-A parts of those that have several (normalized forms)."""
    found: list[str] = []
    for morpheme in analysis._sudachi("C").tokenize(before + stretch):
        if morpheme.part_of_speech()[0] in analysis.JA_DROP_POS:
            continue
        if not analysis._JA_CHAR.search(morpheme.surface()):
            continue
        found.append(morpheme.normalized_form())
        parts = morpheme.split("A")
        if len(parts) > 1:
            found.extend(part.normalized_form() for part in parts)
    return found


def with_jieba(stretch: str, before: str = "") -> list[str]:
    """The module's Japanese terms and jieba's words of the stretch's Han runs."""
    found = JAPANESE(stretch, before)
    for run in analysis._HAN_RUN.findall(stretch):
        found.extend(analysis._segment()(run))
    return found


# --- Korean: Kiwi (not in the module) --------------------------------------------------------

# Kiwi tags (Sejong) whose morphemes are not terms, by prefix: particles (J: 를, 에서),
# endings (E: 습니다, 는), suffixes (XS: 하 of 사용하다, 권 of 소유권), the copula (VCP: 이다),
# symbols (S) and Kiwi's added codas (Z).
KO_DROP_TAGS = ("J", "E", "XS", "VCP", "S", "Z")
_KO_VERB_TAGS = frozenset({"VV", "VA", "VX", "VCN"})  # stems, indexed as 먹다, 춥다, 않다
# A Korean stretch: Hangul words with the spaces and punctuation between them.
_HANGUL_STRETCH = regex.compile(r"\p{Hangul}++(?:[ \t,.!?;:]++\p{Hangul}++)*+")


def kiwi_missing() -> str | None:
    """Why the kiwi rows cannot run (a package not installed), or None; imports nothing."""
    for module, package in (("kiwipiepy", "kiwipiepy"), ("kiwipiepy_model", "kiwipiepy-model")):
        if importlib.util.find_spec(module) is None:
            return f"{package} is not installed (it is in the dev extra: pip install -e '.[dev]')"
    return None


def _load_kiwi(dictionaries: bool = False) -> Any:
    """Kiwi with the model in the kiwipiepy-model wheel, one thread; its typo and multi-word
    dictionaries only if asked (without them: half the load time and 200 MB less)."""
    from kiwipiepy import Kiwi

    with warnings.catch_warnings():  # that num_workers=0 means one thread since 0.21
        warnings.simplefilter("ignore", DeprecationWarning)
        if dictionaries:
            kiwi = Kiwi(num_workers=0)
        else:
            kiwi = Kiwi(num_workers=0, load_typo_dict=False, load_multi_dict=False)
    kiwi.tokenize("")  # Kiwi loads its model on first use
    return kiwi


_kiwis: dict[bool, Any] = {}


def kiwi(dictionaries: bool = False) -> Any:
    if dictionaries not in _kiwis:
        _kiwis[dictionaries] = _load_kiwi(dictionaries)
    return _kiwis[dictionaries]


def kiwi_korean(
    stretch: str,
    before: str = "",
    *,
    drop: tuple[str, ...] = KO_DROP_TAGS,
    dictionaries: bool = False,
) -> list[str]:
    """The content morphemes of a Korean stretch: nouns as they are, verb and adjective stems
    as their dictionary form; `before` is the letter or digit the stretch is glued to (pip을,
    8080으로), read with it so that what follows is seen as a particle, but no term."""
    found: list[str] = []
    analyser = kiwi(dictionaries)
    for piece in analysis._pieces(before + stretch):
        for token in analyser.tokenize(piece):
            tag = token.tag.split("-")[0]  # VV-I (irregular) → VV
            if tag.startswith(drop) or token.start + token.len <= len(before):
                continue
            found.append(token.form + "다" if tag in _KO_VERB_TAGS else token.form)
        before = ""
    return found


def korean_unglued(stretch: str, before: str = "") -> list[str]:
    return kiwi_korean(stretch)


def _glued_korean(text: str, start: int) -> str:
    """The letter or digit just before a Korean stretch (pip을, 8080으로), X after a closing
    quote or bracket (`git add`로), else nothing."""
    if not start:
        return ""
    if analysis._GLUED.match(text, start - 1):
        return text[start - 1]
    return "X" if text[start - 1] in analysis._CLOSING else ""


def terms_with_korean(korean: Segmenter, text: str, query: bool = False) -> list[str]:
    """`analysis.terms`, but each Korean stretch analysed by `korean`."""
    found: list[str] = []
    text = unicodedata.normalize("NFKC", analysis._FRACTION.sub(" ", text))
    end = 0
    for match in _HANGUL_STRETCH.finditer(text):
        found.extend(TERMS(text[end : match.start()], query))
        found.extend(korean(match.group(), _glued_korean(text, match.start())))
        end = match.end()
    found.extend(TERMS(text[end:], query))
    return [term for term in found if len(term) <= analysis.MAX_TERM_CHARS]


@dataclass(frozen=True)
class Variant:
    name: str
    lang: str
    segment: Segmenter | None  # None: the module's own (Korean: pairs)
    index_jieba: bool = False  # analysis.JA_INDEX_JIEBA

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """`analysis.terms` with this variant's Japanese or Korean part."""
        saved = analysis._japanese, analysis.terms, analysis.JA_INDEX_JIEBA
        if self.segment is not None and self.lang == "ja":
            analysis._japanese = self.segment
            analysis.JA_INDEX_JIEBA = self.index_jieba
        elif self.segment is not None:  # search_text and query_text call it by this name
            analysis.terms = partial(terms_with_korean, self.segment)
        try:
            yield
        finally:
            analysis._japanese, analysis.terms, analysis.JA_INDEX_JIEBA = saved


def chosen() -> dict[str, Variant]:
    """The module's own analysis, as a variant of each language."""
    index = "+index-jieba" if analysis.JA_INDEX_JIEBA else ""
    name = f"sudachi-{analysis.JA_SPLIT_MODE}-{analysis.JA_FORM}{index}"
    return {
        "ja": Variant(name, "ja", JAPANESE, analysis.JA_INDEX_JIEBA),
        "ko": Variant("pairs", "ko", None),
    }


def variants(smoke: bool, with_kiwi: bool) -> list[Variant]:
    mine = chosen()
    found = [Variant("pairs", "ja", pairs_japanese), mine["ja"]]
    if not smoke:
        mode, form = analysis.JA_SPLIT_MODE, analysis.JA_FORM
        found.append(Variant(f"sudachi-{mode}-{form}+jieba", "ja", with_jieba))
        found.append(Variant("sudachi-AC-normalized", "ja", sudachi_ac))
        for mode in "ABC":
            for form in ("normalized", "dictionary", "surface"):
                found.append(
                    Variant(f"sudachi-{mode}-{form}", "ja", partial(JAPANESE, mode=mode, form=form))
                )
            keep = partial(JAPANESE, mode=mode, drop=frozenset({"補助記号", "記号", "空白"}))
            found.append(Variant(f"sudachi-{mode}-normalized+particles", "ja", keep))
    found.append(mine["ko"])
    if with_kiwi:
        found.append(Variant("kiwi-content", "ko", kiwi_korean))
    if with_kiwi and not smoke:
        found.append(Variant("kiwi-all", "ko", partial(kiwi_korean, drop=("S", "Z"))))
        found.append(Variant("kiwi-content-unglued", "ko", korean_unglued))
        dicts = partial(kiwi_korean, dictionaries=True)
        found.append(Variant("kiwi-content+dicts", "ko", dicts))
    unique: dict[tuple[str, str], Variant] = {}
    for variant in found:
        unique.setdefault((variant.lang, variant.name), variant)
    return list(unique.values())


# --- measuring -------------------------------------------------------------------------------


def rank_of(relevant: int, query: list[str], docs: list[Counter[str]]) -> float:
    """1-based BM25 rank of docs[relevant] for `query` (inf if it scores nothing); docs
    scoring the same as the relevant one are counted before it."""
    n = len(docs)
    avgdl = sum(sum(doc.values()) for doc in docs) / n
    df = Counter(term for doc in docs for term in doc)
    scores = []
    for doc in docs:
        length = sum(doc.values())
        score = 0.0
        for term in query:
            tf = doc.get(term, 0)
            if tf:
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                score += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / avgdl))
        scores.append(score)
    mine = scores[relevant]
    if mine <= 0:
        return math.inf
    return 1 + sum(1 for i, s in enumerate(scores) if i != relevant and s >= mine)


def evaluate(passages: list[str], queries: list[tuple[int, str]]) -> dict[str, float]:
    docs = [Counter(analysis.terms(p)) for p in passages]
    ranks = [rank_of(i, analysis.query_text(q).split(), docs) for i, q in queries]
    mrr = sum(1 / r for r in ranks if r <= DEPTH) / len(ranks)
    top1 = sum(1 for r in ranks if r == 1) / len(ranks)
    top3 = sum(1 for r in ranks if r <= 3) / len(ranks)
    return {
        "mrr@10": round(mrr, 3),
        "top1": round(top1, 3),
        "top3": round(top3, 3),
        "n": len(ranks),
    }


def ko_docs() -> tuple[list[str], list[tuple[int, str]]] | None:
    """The Korean dev set (benchmarks/data/ko-docs): its pages, and each question with the
    index of the page that answers it; None where the folder is missing."""
    folder = KO_DOCS
    if not (folder / "ko-docs.jsonl").is_file():
        return None
    pages = sorted((folder / "docs").glob("*.md"))
    index = {page.name: i for i, page in enumerate(pages)}
    answers = dict(
        line.split("\t")[:2]
        for line in (folder / "ko-docs.qrels.tsv").read_text("utf-8").splitlines()[1:]
        if line.strip()
    )
    questions = [
        json.loads(line)
        for line in (folder / "ko-docs.jsonl").read_text("utf-8").splitlines()
        if line.strip()
    ]
    return [page.read_text("utf-8") for page in pages], [
        (index[answers[q["qid"]]], q["query"]) for q in questions
    ]


def speed(passages: list[str], rounds: int) -> int:
    """Characters per second analysed: the best of `rounds` passes, after one to warm up."""
    chars = sum(len(p) for p in passages)
    best = math.inf
    for _ in range(rounds + 1):
        start = time.perf_counter()
        for p in passages:
            analysis.terms(p)
        best = min(best, time.perf_counter() - start)
    return round(chars / best)


def load_times(with_kiwi: bool) -> dict[str, float]:
    """Seconds of each dictionary's first use in this process."""
    out = {}
    first_uses: list[tuple[str, Callable[[], object]]] = [
        ("jieba", lambda: analysis._segment()("预热")),
        ("sudachi", lambda: analysis._sudachi(analysis.JA_SPLIT_MODE).tokenize("東京")),
    ]
    if with_kiwi:
        first_uses.append(("kiwi", kiwi))
    for name, first_use in first_uses:
        start = time.perf_counter()
        first_use()
        out[name] = round(time.perf_counter() - start, 2)
    return out


EXAMPLES = {
    "ja": [
        "東京都に住んでいます",
        "所有権を移さずに値を借りることができます",
        "サーバの設定ファイルを書き換えた",
        "おいしいラーメンを食べたかった",
        "Pythonのパッケージは pip でインストールします",
    ],
    "ko": [
        "한국어 형태소 분석기를 사용합니다",
        "서울에 살고 있으며 지하철을 타고 다닙니다",
        "소유권을 옮기지 않고 값을 빌립니다",
        "추워져서 두꺼운 코트를 샀어요",
        "포트를 8080으로 바꾸려면 pip을 설치합니다",
    ],
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a tiny subset, in seconds")
    args = parser.parse_args(argv)
    data = json.loads(DATA.read_text(encoding="utf-8"))
    kiwi_skipped = kiwi_missing()
    with_kiwi = kiwi_skipped is None
    loads = load_times(with_kiwi)
    sets: dict[str, tuple[list[str], list[tuple[int, str]], list[tuple[int, str]]]] = {}
    for lang in ("ja", "ko"):
        items = data[lang][:8] if args.smoke else data[lang]
        passages = [item["passage"] for item in items]
        if not args.smoke:
            passages += data[f"{lang}_distractors"]
        questions = [(i, item["question"]) for i, item in enumerate(items)]
        keywords = [(i, item["keywords"]) for i, item in enumerate(items) if "keywords" in item]
        sets[lang] = (passages, questions, keywords)

    mine = chosen()
    results: list[dict[str, Any]] = []
    for variant in variants(args.smoke, with_kiwi):
        passages, questions, keywords = sets[variant.lang]
        with variant.active():
            results.append(
                {
                    "lang": variant.lang,
                    "analyser": variant.name,
                    "chosen": variant == mine[variant.lang],
                    "questions": evaluate(passages, questions),
                    "keywords": evaluate(passages, keywords) if keywords else None,
                    "chars_per_s": speed(passages, 2 if args.smoke else 5),
                }
            )

    counts = {
        lang: f"{len(p)} passages, {len(q)} questions, {len(k)} keyword queries"
        for lang, (p, q, k) in sets.items()
    }
    print(f"BM25, MRR@10 / top-1 — ja: {counts['ja']}; ko: {counts['ko']}")
    header = f"{'lang':4}  {'analyser':40} {'questions':>13} {'keywords':>13} {'chars/s':>10}"
    print(header)
    print("-" * len(header))
    for row in results:
        cells = [
            f"{row[key]['mrr@10']:.3f} / {row[key]['top1']:.3f}" if row[key] else ""
            for key in ("questions", "keywords")
        ]
        name = ("* " if row["chosen"] else "  ") + row["analyser"]
        speed_cell = f"{row['chars_per_s']:,}"
        print(f"{row['lang']:4}{name:42} {cells[0]:>13} {cells[1]:>13} {speed_cell:>10}")
    korean = None if args.smoke else ko_docs()
    if korean is not None:
        pages, asked = korean
        print(
            f"ko-docs ({len(asked)} Korean questions, {len(pages)} pages of the Korean "
            "Debian FAQ), BM25 over whole pages: MRR@10 / top-1 / top-3"
        )
        for variant in variants(args.smoke, with_kiwi):
            if variant.lang == "ko":
                with variant.active():
                    m = evaluate(pages, asked)
                results.append({"lang": "ko-docs", "analyser": variant.name, "questions": m})
                print(f"  {variant.name:40} {m['mrr@10']:.3f} / {m['top1']:.3f} / {m['top3']:.3f}")
    if kiwi_skipped:
        print(f"kiwi rows skipped: {kiwi_skipped}")
    print(f"first use, seconds: {loads}")
    print()
    shown = {lang: [v for v in variants(True, with_kiwi) if v.lang == lang] for lang in mine}
    for lang in ("ja", "ko"):
        for sentence in EXAMPLES[lang]:
            print(sentence)
            for variant in shown[lang]:
                with variant.active():
                    doc, question = analysis.search_text(sentence), analysis.query_text(sentence)
                print(f"  {variant.name:34} {doc}")
                if question != " ".join(dict.fromkeys(doc.split())):
                    print(f"  {'  as a query':34} {question}")
    summary = {"results": results, "load_seconds": loads, "kiwi_skipped": kiwi_skipped}
    print(json.dumps(summary, ensure_ascii=False))


if __name__ == "__main__":
    main(sys.argv[1:])
