"""ZIP-based document formats (Office Open XML, OpenDocument, EPUB): is this an intact archive
with the parts its format cannot do without, and not a bomb?"""

from __future__ import annotations

import io
import zipfile
import zlib

from tasks.core.reasons import Reason
from tasks.parse.errors import LoadError

ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
MAX_UNPACKED = 1 << 30  # an archive that unpacks to more is refused as too_large


def check_zip(data: bytes, what: str, parts: tuple[str, ...], damaged: Reason) -> None:
    """Raise LoadError (`damaged`, or too_large) unless `data` is a ZIP archive whose members
    are intact, unpack to at most MAX_UNPACKED bytes and include `parts`; `what` names the
    format in messages (".odt")."""
    if not data.startswith(ZIP_MAGICS):
        raise LoadError(damaged, f"not a ZIP archive, so not a {what}")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = set(archive.namelist())
            unpacked = sum(info.file_size for info in archive.infolist())
            if unpacked > MAX_UNPACKED:
                raise LoadError(
                    Reason.TOO_LARGE, f"the archive unpacks to {unpacked / 2**30:.1f} GiB"
                )
            for part in parts:
                if part not in names:
                    raise LoadError(damaged, f"missing part {part}")
            bad = archive.testzip()  # reads every member: CRC and deflate errors show here
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, ValueError) as exc:
        raise LoadError(damaged, f"{type(exc).__name__}: {exc}") from None
    if bad is not None:
        raise LoadError(damaged, f"corrupt member {bad}")


def read_member(data: bytes, name: str) -> bytes | None:
    """One member of an archive that `check_zip` accepted; None when it has no such member."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        try:
            return archive.read(name)
        except KeyError:
            return None
