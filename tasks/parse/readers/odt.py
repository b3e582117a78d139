"""OpenDocument text (.odt) through unstructured's `partition_odt`, which has pandoc convert it
to .docx and partitions that: heading styles make the heading path and tables become rows, as
for Word files (tasks/parse/readers/office.py).

Told from the bytes first: a file that is not an intact ZIP archive with a content.xml is
`damaged_file`, one whose manifest lists encrypted members `encrypted`; pandoc's own errors on
what slips through are `damaged_file` too. Metadata: meta.xml (`odt_metadata` below).
"""

from __future__ import annotations

import io

from tasks.core.reasons import Reason
from tasks.core.records import Block, Metadata, SourceFile
from tasks.parse.archives import check_zip, read_member
from tasks.parse.errors import LoadError
from tasks.parse.metadata import element_values, from_keys, local_name, one_line, xml_root
from tasks.parse.pandoc import pandoc_failure, use_bundled_pandoc
from tasks.parse.readers.office import office_blocks
from tasks.parse.registry import Reading, ReadOptions, register

# --- Metadata ----------------------------------------------------------------------------------


def odt_metadata(data: bytes) -> Metadata:
    """What an OpenDocument file's meta.xml says (its user-defined fields by their names)."""
    root = xml_root(read_member(data, "meta.xml"))
    if root is None:
        return Metadata()
    fields = [element for meta in root if local_name(meta.tag) == "meta" for element in meta]
    declared = element_values(e for e in fields if local_name(e.tag) != "user-defined")
    for element in fields:
        name = next((v for k, v in element.attrib.items() if local_name(k) == "name"), None)
        if local_name(element.tag) == "user-defined" and name and one_line(element.text):
            declared.setdefault(name, one_line(element.text))  # never over a standard field
    return from_keys(
        declared,
        {
            "title": ("title",),
            "authors": ("initial-creator", "creator"),
            "created": ("creation-date",),
            "modified": ("date",),
            "language": ("language",),
        },
    )


# --- Reading -----------------------------------------------------------------------------------


def read_odt(data: bytes) -> list[Block]:
    """The blocks of an .odt file; LoadError with its reason when unreadable."""
    check_zip(data, ".odt", ("content.xml",), Reason.DAMAGED_FILE)
    if b"encryption-data" in (read_member(data, "META-INF/manifest.xml") or b""):
        raise LoadError(Reason.ENCRYPTED, "the .odt file is password-protected")
    use_bundled_pandoc()
    from unstructured.partition.odt import partition_odt

    try:
        elements = partition_odt(file=io.BytesIO(data), languages=[""])
    except RuntimeError as exc:  # pandoc could not read it
        raise pandoc_failure(exc) from None
    return office_blocks(elements, "docx")


def _read(source: SourceFile, data: bytes, options: ReadOptions) -> Reading:
    blocks = read_odt(data)  # checks the archive first
    return Reading(blocks, metadata=odt_metadata(data))


def warm_up() -> None:
    import unstructured.partition.odt  # noqa: F401

    use_bundled_pandoc()


register(
    "odt",
    _read,
    (Reason.DAMAGED_FILE, Reason.ENCRYPTED, Reason.TOO_LARGE),
    warm_up=warm_up,
    code=(
        "tasks.parse.readers.office",
        "tasks.parse.archives",
        "tasks.parse.pandoc",
        "tasks.parse.metadata",
    ),
)
