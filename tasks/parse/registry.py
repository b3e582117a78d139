"""The document formats doc-indexer reads, each registered once by the module that reads it.

A module of tasks/parse/readers/, or one that another package names under the
"doc_indexer.readers" entry points (`readers()` imports them all, tasks/core/plugins.py, so a
new module needs no import line anywhere), calls `register` with everything about its format:
its plain facts (`Format`: the `--type` name, MIME type and file suffixes), the read function
(bytes → blocks, plus a title where the format has one, notes, the pages read by OCR and the
file's metadata, read beside it), the failure reasons it can give, an optional warm-up, and the
modules whose code decides its output. Everything else derives from this table: discovery's
suffixes and search's `--type` (tasks/parse/formats.py), parsing's dispatch on a file's MIME
type (tasks/parse/document.py), the parser process's warm-up, and the load step's cache key,
which covers every reader's code (tasks/ingest/cache_keys.py).

Adding a format is one module in tasks/parse/readers/ (plus its test); `register` refuses a
format whose name, MIME type or a suffix another format has. Reader modules import their
parsers inside functions: every process that finds files or parses a `--type` loads them all.

What a format needs to be told (PDF: OCR on or off, its time budget) is its own options type,
declared in its reader module; `ReadOptions` carries them by format name, and each reader
looks up its own (`options.of("pdf", PdfOptions)`), so the generic contract names no format.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import PurePosixPath
from typing import TypeVar

from tasks.core.plugins import READERS_GROUP, load_plugins
from tasks.core.reasons import Reason
from tasks.core.records import Block, Metadata, SourceFile

READERS_PACKAGE = "tasks.parse.readers"

# Reasons that any file can end with, whatever its format: set by load_document, the parser
# process, the load step and the pipeline, not by a reader.
GENERAL_REASONS = (
    Reason.EMPTY_FILE,
    Reason.NO_TEXT,
    Reason.TOO_LARGE,
    Reason.PARSE_TIMEOUT,
    Reason.PARSE_CRASH,
    Reason.PARSE_ERROR,
    Reason.UNREADABLE,
    Reason.VANISHED,
    Reason.BATCH_FAILED,
)

OptionsT = TypeVar("OptionsT")


@dataclass(frozen=True)
class Format:
    """A document format: its `--type` name, MIME type and file suffixes (lower case, dot)."""

    name: str
    mime: str
    suffixes: tuple[str, ...]


@dataclass(frozen=True)
class ReadOptions:
    """How to read files: what LoadSettings says, as each format's own options under the
    format's name; a format given none reads with its options type's defaults."""

    by_format: Mapping[str, object] = field(default_factory=dict)

    def of(self, name: str, kind: type[OptionsT]) -> OptionsT:
        """The options of the format `name`, of its type `kind` (its defaults if none)."""
        found = self.by_format.get(name)
        if found is None:
            return kind()
        if not isinstance(found, kind):
            raise TypeError(f"the {name} options are a {type(found).__name__}, not {kind.__name__}")
        return found

    def with_format(self, name: str, options: object) -> ReadOptions:
        """These options with the format `name`'s replaced by `options`."""
        return ReadOptions({**self.by_format, name: options})


@dataclass(frozen=True)
class Reading:
    """What a reader made of one file."""

    blocks: list[Block]
    title: str | None = None  # the document's own title (an email's subject); None: a heading
    notes: tuple[str, ...] = ()  # what an indexed document misses (the ledger's error column)
    metadata: Metadata = field(default_factory=Metadata)  # what the file says about itself
    ocr_pages: tuple[int, ...] = ()  # pages whose text was read by OCR (the ledger's column)
    ocr_seconds: float = 0.0  # time spent on OCR, where the format has it


# The read function: the file (its doc_id and MIME type), its bytes and the options → what it
# holds. A file that cannot be indexed raises LoadError with one of the reader's reasons.
ReadFunction = Callable[[SourceFile, bytes, ReadOptions], Reading]


@dataclass(frozen=True)
class Reader:
    """How one format is read."""

    format: Format
    read: ReadFunction
    reasons: tuple[Reason, ...]  # the reasons `read` raises LoadError with
    warm_up: Callable[[], None] | None = None  # imports and checks done once per parser process
    code: tuple[str, ...] = ()  # the modules whose code decides the output, the reader's first


_REGISTERED: dict[str, Reader] = {}  # format name → reader, in the order registered
_LOCK = threading.RLock()  # re-entered only by a reader module asking for the readers
_loading = False  # True while readers() imports the reader modules


def register(
    format: Format,
    read: ReadFunction,
    reasons: tuple[Reason, ...],
    *,
    warm_up: Callable[[], None] | None = None,
    code: tuple[str, ...] = (),
) -> Reader:
    """Register the format `format` and how it is read.

    `code` names the modules besides the read function's own whose code decides the output.
    """
    if not isinstance(format, Format):
        raise ValueError(f"{read.__module__}: register() names no Format: {format!r}")
    if format.name in _REGISTERED:
        raise ValueError(f"format {format.name!r} has two readers")
    if not format.suffixes or any(s[:1] != "." or s != s.lower() for s in format.suffixes):
        raise ValueError(f"format {format.name!r}: suffixes are lower case with a dot ('.md')")
    for other in (reader.format for reader in _REGISTERED.values()):
        if other.mime == format.mime or set(other.suffixes) & set(format.suffixes):
            raise ValueError(
                f"{read.__module__}: format {format.name!r} takes a name or suffix (or MIME "
                f"type) another format ({other.name!r}) has"
            )
    modules = tuple(dict.fromkeys((read.__module__, *code)))
    reader = Reader(format, read, tuple(reasons), warm_up, modules)
    _REGISTERED[format.name] = reader
    return reader


@cache
def _load_readers() -> dict[str, Reader]:
    load_plugins(READERS_PACKAGE, READERS_GROUP)  # every module there, then entry points
    # The text formats first (`--type md` is the first choice shown), then as registered.
    ordered = sorted(_REGISTERED.values(), key=lambda r: not r.format.mime.startswith("text/"))
    return {reader.format.mime: reader for reader in ordered}


def readers() -> dict[str, Reader]:
    """MIME type → reader, every reader module loaded: the text formats first, then the
    others in the order their modules registered them (module name order)."""
    global _loading
    with _LOCK:  # a reader module imported half-way by two threads would register twice
        if _loading:  # this thread, from a reader module being imported: it would see a part
            raise RuntimeError(
                "a reader module asked for the readers (or imported tasks.parse.formats) "
                "while they load; register its format only"
            )
        _loading = True
        try:
            return _load_readers()
        finally:
            _loading = False


def reader_for(mime_type: str) -> Reader | None:
    """The reader of a MIME type; None for a type no format has."""
    return readers().get(mime_type)


def reader_for_name(file_name: str) -> Reader | None:
    """The reader of a file name by its suffix (as discovery decides); None when unsupported."""
    suffix = PurePosixPath(file_name).suffix.lower()  # not formats.MIME_TYPES: it imports us
    return next((r for r in readers().values() if suffix in r.format.suffixes), None)


_WARM: set[Callable[[], None]] = set()  # the warm-ups this process has run
_WARM_LOCK = threading.Lock()


def warm_up_reader(reader: Reader) -> None:
    """Run `reader`'s warm-up unless this process has (readers sharing one run it once)."""
    if reader.warm_up is None or reader.warm_up in _WARM:
        return
    with _WARM_LOCK:
        if reader.warm_up not in _WARM:
            reader.warm_up()
            _WARM.add(reader.warm_up)


def warm_up_readers(names: Collection[str] | None = None) -> None:
    """Run the warm-up of every reader, or of the readers of the formats `names`."""
    for reader in readers().values():
        if names is None or reader.format.name in names:
            warm_up_reader(reader)


def reader_code() -> tuple[str, ...]:
    """Every module whose code decides some reader's output, each once."""
    return tuple(dict.fromkeys(m for reader in readers().values() for m in reader.code))
