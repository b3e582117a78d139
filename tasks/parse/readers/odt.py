"""OpenDocument text (.odt) through unstructured's `partition_odt`, which has pandoc convert it
to .docx and partitions that: heading styles make the heading path and tables become rows, as
for Word files (tasks/parse/readers/office.py).

Told from the bytes first: a file that is not an intact ZIP archive with a content.xml is
`damaged_file`, one whose manifest lists encrypted members `encrypted`; pandoc's own errors on
what slips through are `damaged_file` too. Metadata: meta.xml (`odt_metadata` below).
"""

from __future__ import annotations

from tasks.core.reasons import Reason
from tasks.core.records import Block, Metadata
from tasks.parse.archives import check_zip, read_member
from tasks.parse.errors import LoadError
from tasks.parse.metadata import element_values, from_keys, local_name, one_line, xml_root
from tasks.parse.pandoc import pandoc_elements, register_pandoc_format
from tasks.parse.readers.office import office_blocks
from tasks.parse.registry import Format

FORMAT = Format("odt", "application/vnd.oasis.opendocument.text", (".odt",))

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
    return office_blocks(pandoc_elements("odt", data), "docx")


# What read_odt raises, and the modules besides this one and tasks/parse/pandoc.py whose
# code decides the output.
REASONS = (Reason.DAMAGED_FILE, Reason.ENCRYPTED, Reason.TOO_LARGE)
CODE = ("tasks.parse.readers.office", "tasks.parse.archives", "tasks.parse.metadata")
register_pandoc_format(FORMAT, read_odt, odt_metadata, REASONS, CODE)
