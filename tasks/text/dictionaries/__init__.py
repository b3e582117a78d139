"""Bilingual dictionaries between English and another language, each one module here that
registers itself (`register`), found as the modules of this package (adding one is a module;
no entry points are read: a question's first lookup should not scan every installed
distribution).

A dictionary gives entries: the headwords of one sense group in its language, the English
glosses in the dictionary's order, and whether the dictionary marks the entry as a common
word. It comes from an installed wheel (nothing is downloaded); tasks/text/lexicon.py turns
its entries into the lexicon a question is translated with.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    """One dictionary entry: headwords in the dictionary's language and their English glosses."""

    headwords: tuple[str, ...]  # the preferred written form first
    glosses: tuple[str, ...]  # English, in the dictionary's order (the first sense first)
    common: bool = False  # the dictionary marks the entry as a common word


@dataclass(frozen=True)
class Dictionary:
    """A bilingual dictionary between English and `language`."""

    language: str  # the headwords' language: "zh", "ja" (ISO 639-1)
    name: str  # as its authors call it
    licence: str  # the data's licence, as README names it
    distribution: str  # the installed package that holds the data
    entries: Callable[[], Iterator[Entry]]  # every entry, read from the package's files
    module: str  # the module that registered it


_REGISTERED: dict[str, Dictionary] = {}


def register(dictionary: Dictionary) -> Dictionary:
    if dictionary.language in _REGISTERED:
        raise ValueError(f"a dictionary for {dictionary.language!r} is registered already")
    _REGISTERED[dictionary.language] = dictionary
    return dictionary


def dictionaries() -> dict[str, Dictionary]:
    """language → its dictionary, every module of this package imported first."""
    if not _REGISTERED:
        for module in sorted(found.name for found in pkgutil.iter_modules(__path__)):
            importlib.import_module(f"{__name__}.{module}")
    return dict(_REGISTERED)
