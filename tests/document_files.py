"""Small real .odt, .rtf and .epub files (converted from Markdown by the bundled pandoc), made
in the tests; and a hash-embedded index of real loaded files for the `--type` filter."""

from __future__ import annotations

import tempfile
from pathlib import Path

from tasks.core.records import Document
from tasks.dataset.dataset import Dataset
from tasks.dataset.schema import Fingerprint
from tasks.embed.hash_backend import HashEmbedder
from tasks.ingest.discover import discover
from tasks.ingest.pandoc import use_bundled_pandoc
from tasks.ingest.parse import load_document
from tasks.search.params import SearchParams
from tasks.search.searcher import Searcher
from tasks.text.split import SplitSettings, split_document

MARKDOWN = """\
# Llamas

Llamas live in the Andes and carry loads for herders.

## Wool

Their wool is soft and warm.

# Alpacas

Alpacas hum when they are curious.

| Region | Herds |
|--------|-------|
| North  | 120   |
| South  | 95    |
"""


def convert(markdown: str, to: str, *extra: str) -> bytes:
    """`markdown` converted by the bundled pandoc to the format `to`."""
    import pypandoc

    use_bundled_pandoc()
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / f"out.{to}"
        pypandoc.convert_text(
            markdown, to, format="md", outputfile=str(out), extra_args=list(extra)
        )
        return out.read_bytes()


def make_odt(markdown: str = MARKDOWN) -> bytes:
    return convert(markdown, "odt")


def make_rtf(markdown: str = MARKDOWN) -> bytes:
    return convert(markdown, "rtf", "--standalone")


def make_epub(markdown: str = MARKDOWN) -> bytes:
    return convert(markdown, "epub", "--metadata", "title=Camelids")


def load_named(folder: Path, name: str) -> Document:
    """Load the file `name` of `folder` as a run would (discovered, then loaded)."""
    source = next(s for s in discover(folder).files if s.doc_id == name)
    return load_document(source)


def type_filter_hits(tmp_path: Path, files: dict[str, bytes], type_name: str) -> set[str]:
    """Index `files` (loaded for real, embedded by the hash embedder) and return the doc_ids
    that a search with `--type type_name` finds."""
    corpus = tmp_path / "typed"
    corpus.mkdir(parents=True)
    for name, data in files.items():
        (corpus / name).write_bytes(data)
    documents = [load_document(source) for source in discover(corpus).files]
    embedder, split = HashEmbedder(16), SplitSettings(chunk_size=200, chunk_overlap=20)
    dataset = Dataset(str(tmp_path / "index"))
    dataset.prepare(Fingerprint.of(embedder.info, split))
    chunks = [c for d in documents for c in split_document(d, split).chunks]
    dataset.write_batch(documents, chunks, embedder.encode([c.text for c in chunks]))
    params = SearchParams(k=100, mode="vector", type=type_name)
    return {hit.doc_id for hit in Searcher(dataset).search("llamas", params)}
