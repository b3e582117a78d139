"""Vector reuse: a chunk whose text is already stored (same model) is not embedded again.

Before a batch is embedded, its chunk text hashes are looked up in the dataset; only texts
with no stored vector are sent to the model, each distinct text once. Editing one paragraph
of a long document therefore re-embeds only the chunks around it.
"""

from __future__ import annotations

import numpy as np

from tasks.core.records import Chunk
from tasks.ingest.pipeline import Vectors


def texts_to_embed(chunks: list[Chunk], stored: dict[str, np.ndarray]) -> dict[str, str]:
    """text hash → text of the distinct chunk texts that have no stored vector, in order."""
    return {c.text_hash: c.text for c in chunks if c.text_hash not in stored}


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
