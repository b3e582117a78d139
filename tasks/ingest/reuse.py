"""Vector reuse: a chunk whose text is already stored (same model) is not embedded again.

Before a batch is embedded, its chunk text hashes are looked up in the dataset; only texts
with no stored vector are sent to the model, each distinct text once. Editing one paragraph
of a long document therefore re-embeds only the chunks around it.

What the model reads of a chunk (`model_input`) is its text, or, for a model that embeds
headings (ModelInfo.headings), its heading path and then its text; such a dataset's chunks
carry the hash of that input as their `text_hash` (`keyed_by_input`), so a chunk whose text
stays but whose heading changes is embedded again.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tasks.core.records import Chunk, sha256_hex
from tasks.embed.base import model_input as embedded_input
from tasks.ingest.pipeline import Vectors


def model_input(chunk: Chunk, headings: bool) -> str:
    """What the model embeds of `chunk` (tasks/embed/base.py, `model_input`)."""
    return embedded_input(chunk.text, chunk.section, headings)


def keyed_by_input(chunks: tuple[Chunk, ...], headings: bool) -> tuple[Chunk, ...]:
    """The chunks with `text_hash` the hash of their model input, where it is not the text."""
    if not headings:
        return chunks
    return tuple(
        replace(c, text_hash=sha256_hex(model_input(c, headings))) if c.section else c
        for c in chunks
    )


def texts_to_embed(
    chunks: list[Chunk], stored: dict[str, np.ndarray], headings: bool = False
) -> dict[str, str]:
    """text hash → model input of the distinct chunks that have no stored vector, in order."""
    return {c.text_hash: model_input(c, headings) for c in chunks if c.text_hash not in stored}


def assemble(
    chunks: list[Chunk],
    stored: dict[str, np.ndarray],
    embedded: dict[str, np.ndarray],
    dimension: int,
) -> Vectors:
    """One vector per chunk, in order, from the stored and the newly embedded ones."""
    if not chunks:
        return Vectors(np.zeros((0, dimension), dtype=np.float32))
    known = {**stored, **embedded}
    vectors = np.stack([known[chunk.text_hash] for chunk in chunks]).astype(np.float32)
    reused = sum(chunk.text_hash in stored for chunk in chunks)
    return Vectors(vectors, embedded=len(embedded), reused=reused)
