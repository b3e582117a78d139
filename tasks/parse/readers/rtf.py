"""Rich Text Format (.rtf) through unstructured's `partition_rtf`: pandoc converts it to HTML,
whose headings make the heading path as in HTML files. A file that does not start with the
`{\\rtf` header, or that pandoc cannot read, is `damaged_file`. Metadata: the {\\info} group
(tasks/parse/metadata.py)."""

from __future__ import annotations

import io

from tasks.core.reasons import Reason
from tasks.core.records import Block, SourceFile
from tasks.parse.elements import NO_LANGUAGE_DETECTION, elements_to_blocks
from tasks.parse.errors import LoadError
from tasks.parse.metadata import rtf_metadata
from tasks.parse.pandoc import pandoc_failure, use_bundled_pandoc
from tasks.parse.registry import Reading, ReadOptions, register

RTF_MAGIC = b"{\\rtf"


def read_rtf(data: bytes) -> list[Block]:
    """The blocks of an .rtf file; LoadError with its reason when unreadable."""
    if not data.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(RTF_MAGIC):
        raise LoadError(Reason.DAMAGED_FILE, "no {\\rtf header: not an RTF file")
    use_bundled_pandoc()
    from unstructured.partition.rtf import partition_rtf

    try:
        elements = partition_rtf(file=io.BytesIO(data), languages=NO_LANGUAGE_DETECTION)
    except RuntimeError as exc:  # pandoc could not read it
        raise pandoc_failure(exc) from None
    return elements_to_blocks(elements)


def _read(source: SourceFile, data: bytes, options: ReadOptions) -> Reading:
    blocks = read_rtf(data)  # checks the header first
    return Reading(blocks, metadata=rtf_metadata(data))


def warm_up() -> None:
    import unstructured.partition.rtf  # noqa: F401

    use_bundled_pandoc()


register(
    "rtf",
    _read,
    (Reason.DAMAGED_FILE,),
    warm_up=warm_up,
    code=("tasks.parse.elements", "tasks.parse.pandoc", "tasks.parse.metadata"),
)
