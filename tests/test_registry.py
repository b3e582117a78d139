"""Formats are declared once, each with its reader, by the modules of tasks/parse/readers/;
dispatch, `--type`, discovery, warm-up and the load step's cache key derive from them."""

from __future__ import annotations

import pytest

from tasks.core.reasons import Reason
from tasks.core.records import SourceFile
from tasks.ingest.steps import LOAD_CACHE
from tasks.parse import registry
from tasks.parse.document import read_blocks
from tasks.parse.errors import LoadError
from tasks.parse.formats import BY_MIME, FORMATS, MIME_TYPES, TYPES
from tasks.parse.registry import ReadOptions
from tasks.search.params import SearchParams


def test_every_format_has_one_reader_and_unique_facts():
    readers = registry.readers()
    assert [reader.format for reader in readers.values()] == list(FORMATS)
    suffixes = [suffix for f in FORMATS for suffix in f.suffixes]
    assert len(suffixes) == len(set(suffixes)) == len(MIME_TYPES)
    assert len(BY_MIME) == len({f.name for f in FORMATS}) == len(FORMATS)
    assert all(s.startswith(".") and s == s.lower() for s in suffixes)


def test_the_new_formats_are_types_and_suffixes():
    for name, suffix in (("epub", ".epub"), ("odt", ".odt"), ("rtf", ".rtf"), ("eml", ".eml")):
        assert TYPES[name] == MIME_TYPES[suffix]
        assert SearchParams(type=name).mime_type == MIME_TYPES[suffix]
        reader = registry.reader_for_name(f"some/file{suffix.upper()}")
        assert reader is not None and reader.format.name == name


def test_every_reason_is_given_by_some_reader_or_by_any_file():
    declared = {reason for reader in registry.readers().values() for reason in reader.reasons}
    assert declared | set(registry.GENERAL_REASONS) == set(Reason)


def test_the_load_cache_key_covers_every_readers_code():
    covered = LOAD_CACHE.code_modules({})
    for reader in registry.readers().values():
        assert set(reader.code) <= covered, reader.format.name
        assert reader.code[0] == reader.read.__module__


def test_registering_a_second_reader_or_a_taken_suffix_or_no_format_is_refused():
    def read(source, data, options):
        return registry.Reading([])

    registry.readers()
    with pytest.raises(ValueError, match="two readers"):
        registry.register(registry.Format("md", "text/x-other", (".other",)), read, ())
    with pytest.raises(ValueError, match="'md2' takes a name or suffix"):
        registry.register(registry.Format("md2", "text/x-md2", (".md",)), read, ())
    with pytest.raises(ValueError, match="names no Format"):
        registry.register("djvu", read, ())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lower case with a dot"):
        registry.register(registry.Format("djvu", "image/vnd.djvu", ("DJVU",)), read, ())
    assert {"md2", "djvu"}.isdisjoint(r.format.name for r in registry.readers().values())


def test_a_reader_module_that_asks_for_the_readers_while_they_load_is_an_error(monkeypatch):
    def loading_readers() -> dict:
        return registry.readers()  # as a reader module importing tasks.parse.formats would

    monkeypatch.setattr(registry, "_load_readers", loading_readers)
    with pytest.raises(RuntimeError, match="asked for the readers .* while they load"):
        registry.readers()
    monkeypatch.undo()
    assert registry.readers()  # the registry is usable after the error


def test_warm_up_runs_each_readers_warm_up_once(monkeypatch):
    calls: list[str] = []

    def text() -> None:
        calls.append("text")

    def pdf() -> None:
        calls.append("pdf")

    real = registry.readers()
    steps = {"md": text, "html": text, "pdf": pdf, "docx": None}
    fake = {
        TYPES[name]: registry.Reader(
            real[TYPES[name]].format, real[TYPES[name]].read, (), warm_up=step
        )
        for name, step in steps.items()
    }
    monkeypatch.setattr(registry, "readers", lambda: fake)
    monkeypatch.setattr(registry, "_WARM", set())
    registry.warm_up_readers(["md", "html"])  # a parser process starting: the text readers
    assert calls == ["text"]
    source = SourceFile("a.pdf", "/nowhere/a.pdf", 9, 0, "0" * 64, TYPES["pdf"])
    with pytest.raises(LoadError):  # the real PDF reader refuses the bytes, once warm
        read_blocks(source, b"not a pdf", ReadOptions())
    assert calls == ["text", "pdf"], "the PDF reader warmed up on its first file"
    registry.warm_up_readers()
    assert calls == ["text", "pdf"], "each warm-up once per process"
    assert all(
        reader.warm_up is not None
        for reader in real.values()
        if reader.format.name in ("pdf", "docx", "epub", "odt", "rtf")
    )
