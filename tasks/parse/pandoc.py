"""The pandoc that unstructured's EPUB, ODT and RTF partitioners run: the one in the
`pypandoc-binary` wheel, never a download.

unstructured converts those formats with pypandoc, which looks for pandoc on PATH, beside the
interpreter and inside its own package, and uses the newest it finds; it downloads pandoc only
when asked to (`pypandoc.download_pandoc`, which nothing here calls). `use_bundled_pandoc`
points pypandoc at the wheel's binary (`PYPANDOC_PANDOC`; a value the user set wins), so every
machine converts with the same pandoc and a system pandoc of another version changes nothing.
unstructured runs pandoc with `--sandbox`: a document cannot make it read files or fetch URLs.

`register_pandoc_format` registers such a format's reader: its module gives how the bytes
are checked and turned into blocks (`pandoc_elements` partitions them) and its metadata.
"""

from __future__ import annotations

import importlib
import io
import os
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from tasks.core.reasons import Reason
from tasks.core.records import Block, Metadata, SourceFile
from tasks.parse.elements import NO_LANGUAGE_DETECTION
from tasks.parse.errors import LoadError
from tasks.parse.registry import Format, Reading, ReadOptions, register

PANDOC_ENV = "PYPANDOC_PANDOC"


def bundled_pandoc() -> Path:
    """The pandoc binary inside the pypandoc-binary wheel."""
    import pypandoc

    return Path(pypandoc.__file__).parent / "files" / "pandoc"


@cache
def use_bundled_pandoc() -> str:
    """Point pypandoc at the wheel's pandoc and check that it runs; returns its version.

    RuntimeError with what to install when there is no usable pandoc."""
    import pypandoc

    bundled = bundled_pandoc()
    if bundled.is_file():
        os.environ.setdefault(PANDOC_ENV, str(bundled))
    try:
        pypandoc.clean_pandocpath_cache()
        pypandoc.clean_version_cache()
        return str(pypandoc.get_pandoc_version())
    except OSError as exc:
        raise RuntimeError(
            f"pandoc is not usable ({exc}); EPUB, ODT and RTF files need the pypandoc-binary "
            "wheel (`make install` installs it)"
        ) from exc


def pandoc_failure(exc: Exception) -> LoadError:
    """The file's failure when pandoc could not convert it: `damaged_file`, with the first
    line of pandoc's error (unstructured appends installation advice to it)."""
    lines = str(exc).strip().splitlines()
    return LoadError(Reason.DAMAGED_FILE, f"pandoc: {lines[0] if lines else type(exc).__name__}")


def pandoc_elements(name: str, data: bytes, damaged: tuple[type[Exception], ...] = ()) -> list[Any]:
    """The elements of `data` by unstructured's `partition_<name>` (of the module
    `unstructured.partition.<name>`), converted by the wheel's pandoc; pandoc's failure, or
    one of the errors `damaged`, ends the file as `damaged_file`."""
    use_bundled_pandoc()
    module = importlib.import_module(f"unstructured.partition.{name}")
    partition = getattr(module, f"partition_{name}")
    failures: tuple[type[Exception], ...] = (RuntimeError, *damaged)
    try:
        return list(partition(file=io.BytesIO(data), languages=NO_LANGUAGE_DETECTION))
    except failures as exc:  # pandoc could not read it
        raise pandoc_failure(exc) from None


def register_pandoc_format(
    format: Format,
    blocks_of: Callable[[bytes], list[Block]],
    metadata_of: Callable[[bytes], Metadata],
    reasons: tuple[Reason, ...],
    code: tuple[str, ...] = (),
) -> None:
    """Register the format `format`, which unstructured converts with pandoc:
    the blocks `blocks_of` makes of a file's bytes (checking them first), then the metadata
    `metadata_of` reads in them; it warms up by importing the partitioner and finding pandoc.
    `code`: the modules besides `blocks_of`'s own and this one that decide the output."""

    def read(source: SourceFile, data: bytes, options: ReadOptions) -> Reading:
        blocks = blocks_of(data)  # checks the bytes first
        return Reading(blocks, metadata=metadata_of(data))

    def warm_up() -> None:
        importlib.import_module(f"unstructured.partition.{format.name}")
        use_bundled_pandoc()

    register(format, read, reasons, warm_up=warm_up, code=(blocks_of.__module__, *code))
