"""Rows of synthetic documents, written straight to a dataset (as `Dataset.write_batch` takes
them) where a benchmark needs a big table without parsing files."""

from __future__ import annotations

from tasks.core.records import Chunk, chunk_id

SEPARATOR = "\n\n"  # between a document's pieces in its body


def document_chunks(doc_id: str, pieces: list[str], sections: list[str]) -> list[Chunk]:
    """One chunk per piece of a document whose body is the pieces joined by SEPARATOR, with
    their character offsets in that body and the section each is under."""
    chunks, offset = [], 0
    for index, (text, section) in enumerate(zip(pieces, sections, strict=True)):
        chunks.append(
            Chunk(
                chunk_id=chunk_id(doc_id, index, len(pieces)),
                doc_id=doc_id,
                chunk_index=index,
                chunk_count=len(pieces),
                text=text,
                char_start=offset,
                char_end=offset + len(text),
                section=section,
                heading_level=1,
                page_number=None,
            )
        )
        offset += len(text) + len(SEPARATOR)
    return chunks
