"""The pandoc that unstructured's EPUB, ODT and RTF partitioners run: the one in the
`pypandoc-binary` wheel, never a download.

unstructured converts those formats with pypandoc, which looks for pandoc on PATH, beside the
interpreter and inside its own package, and uses the newest it finds; it downloads pandoc only
when asked to (`pypandoc.download_pandoc`, which nothing here calls). `use_bundled_pandoc`
points pypandoc at the wheel's binary (`PYPANDOC_PANDOC`; a value the user set wins), so every
machine converts with the same pandoc and a system pandoc of another version changes nothing.
unstructured runs pandoc with `--sandbox`: a document cannot make it read files or fetch URLs.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

from tasks.core.reasons import Reason
from tasks.parse.errors import LoadError

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
