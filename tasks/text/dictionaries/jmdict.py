"""JMdict, Japanese → English, from the `jamdict-data` wheel (the SQLite database it unpacks;
JMdict is the EDRDG's, CC BY-SA 3.0). An entry's headwords are its kanji forms, else its
readings; it is common where the dictionary gives a form a priority mark (news1, ichi1, …)."""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from collections.abc import Iterator

from tasks.text.dictionaries import Dictionary, Entry, register


def entries() -> Iterator[Entry]:
    from jamdict_data import JAMDICT_DB_PATH

    with sqlite3.connect(f"file:{JAMDICT_DB_PATH}?mode=ro", uri=True) as db:
        kanji, kana = _forms(db, "Kanji", "KJP"), _forms(db, "Kana", "KNP")
        common: set[int] = set()
        for forms in (kanji, kana):
            common.update(idseq for idseq, (_, marked) in forms.items() if marked)
        glosses: dict[int, list[str]] = defaultdict(list)
        rows = db.execute(
            "SELECT s.idseq, g.text FROM Sense s JOIN SenseGloss g ON g.sid = s.ID "
            "WHERE g.lang = 'eng' ORDER BY s.ID"
        )
        for idseq, text in rows:
            glosses[idseq].append(text)
    for idseq, texts in glosses.items():
        written = kanji.get(idseq) or kana.get(idseq)
        if written:
            yield Entry(tuple(written[0]), tuple(texts), idseq in common)


def _forms(db: sqlite3.Connection, table: str, marks: str) -> dict[int, tuple[list[str], bool]]:
    """idseq → (its forms in `table`, in order; whether any has a priority mark in `marks`)."""
    found: dict[int, tuple[list[str], bool]] = {}
    rows = db.execute(
        f"SELECT f.idseq, f.text, EXISTS (SELECT 1 FROM {marks} p WHERE p.kid = f.ID) "  # noqa: S608 - table names, not values
        f"FROM {table} f ORDER BY f.ID"
    )
    for idseq, text, marked in rows:
        forms, was = found.get(idseq, ([], False))
        forms.append(text)
        found[idseq] = (forms, was or bool(marked))
    return found


JMDICT = register(
    Dictionary(
        language="ja",
        name="JMdict",
        licence="CC BY-SA 3.0 (EDRDG)",
        distribution="jamdict-data",
        entries=entries,
        module=__name__,
    )
)
