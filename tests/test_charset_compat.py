"""The canary of tasks/core/charset_compat.py: charset-normalizer's internal functions still
exist with the parameters used and measure what tasks/parse/decode.py relies on, and its
public matches still spell encodings as decode.py matches them. A failure here means the
installed charset-normalizer changed under that module: change it, then the pin."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import charset_normalizer
from charset_normalizer.cd import coherence_ratio
from charset_normalizer.md import mess_ratio

from tasks.core import charset_compat

from .conftest import ROOT

RUSSIAN = "Съешь же ещё этих мягких французских булок, да выпей чаю. Это предложение на русском."
JAPANESE = "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。"


def test_the_internal_functions_take_the_parameters_used():
    assert "maximum_threshold" in inspect.signature(mess_ratio).parameters
    assert next(iter(inspect.signature(coherence_ratio).parameters)) == "decoded_sequence"


def test_mess_tells_a_wrong_decoding_over_the_whole_text():
    """A right decoding is not messy, a wrong one is; the whole text is measured (by default
    mess_ratio stops once past 0.2, with a lower figure for this text)."""
    wrong = JAPANESE.encode("shift_jis").decode("cp1251", errors="replace")
    assert charset_compat.mess(JAPANESE) < 0.1
    assert charset_compat.mess(wrong) > 0.5
    assert charset_compat.mess(wrong) > mess_ratio(wrong)


def test_coherence_is_the_best_languages_ratio():
    languages = coherence_ratio(RUSSIAN)
    assert languages and all(isinstance(n, str) and 0 < r <= 1 for n, r in languages)
    assert [r for _, r in languages] == sorted((r for _, r in languages), reverse=True)
    assert dict(languages).get("Russian", 0) > 0.3  # language names, as it spells them
    assert charset_compat.language_coherence(RUSSIAN) == languages[0][1]
    assert charset_compat.language_coherence("12345 67890") == 0.0  # no language at all


def test_matches_spell_encodings_as_decode_matches_them():
    text = "A plain English note, long enough to be recognised. " * 4
    wide = charset_normalizer.from_bytes(text.encode("utf-16-le")).best()
    assert wide is not None and wide.encoding.startswith(charset_compat.WIDE_UTF), wide
    escaped = charset_normalizer.from_bytes((JAPANESE * 3).encode("iso2022_jp")).best()
    assert escaped is not None and escaped.encoding.startswith(charset_compat.ISO_2022), escaped


def test_no_other_module_imports_charset_normalizers_internal_modules():
    compat = Path(charset_compat.__file__)
    found = []
    for package in ("tasks", "flows", "deployments"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text("utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.module:
                    modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                elif isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                else:
                    continue
                internal = [m for m in modules if m.startswith("charset_normalizer.")]
                found += [f"{path.relative_to(ROOT)}: {m}" for m in internal]
    assert found and all(line.startswith(str(compat.relative_to(ROOT))) for line in found), found
