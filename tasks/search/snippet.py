"""The part of a hit's text worth showing: the window holding most words of the question."""

from __future__ import annotations

import re

import regex

from tasks.core.scripts import CJK

_SNIPPET_TERM = regex.compile(rf"[{CJK}]+|\w{{3,}}")
_CJK = regex.compile(f"[{CJK}]")
_MAX_SHIFT = 40  # characters a cut may move to reach a word boundary (longer: cut anyway)


def snippet(text: str, question: str, width: int = 300) -> str:
    """The `width`-character window of `text` that holds the most words of the question.

    Whitespace is collapsed; Chinese, Japanese and Korean runs count by character pairs.
    """
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    terms: set[str] = set()
    for term in _SNIPPET_TERM.findall(question):
        if _CJK.match(term) and len(term) > 1:
            terms.update(term[i : i + 2] for i in range(len(term) - 1))
        else:
            terms.add(term)
    starts = []
    if terms:
        pattern = "|".join(re.escape(term) for term in sorted(terms, key=len, reverse=True))
        starts = [match.start() for match in re.finditer(pattern, flat, re.IGNORECASE)]
    best, most, end = 0, 0, 0
    for first, start in enumerate(starts):
        while end < len(starts) and starts[end] < start + width * 3 // 4:
            end += 1
        if end - first > most:
            best, most = start, end - first
    begin = max(0, min(best - width // 4, len(flat) - width))
    end = begin + width
    begin, end = _word_start(flat, begin), _word_end(flat, end, begin)
    window = flat[begin:end].strip()
    return ("… " if begin else "") + window + (" …" if end < len(flat) else "")


def _inside_word(flat: str, cut: int) -> bool:
    """Whether cutting `flat` before index `cut` splits a word (CJK runs may be cut anywhere)."""
    if cut <= 0 or cut >= len(flat):
        return False
    left, right = flat[cut - 1], flat[cut]
    return not (left.isspace() or right.isspace() or _CJK.match(left) or _CJK.match(right))


def _word_start(flat: str, begin: int) -> int:
    """`begin`, moved forward to the start of the next word when it falls inside one."""
    if not _inside_word(flat, begin):
        return begin
    space = flat.find(" ", begin, begin + _MAX_SHIFT)
    return space + 1 if space >= 0 else begin


def _word_end(flat: str, end: int, begin: int) -> int:
    """`end`, moved back to the end of the previous word when it falls inside one."""
    if not _inside_word(flat, end):
        return end
    space = flat.rfind(" ", max(begin, end - _MAX_SHIFT), end)
    return space if space > begin else end
