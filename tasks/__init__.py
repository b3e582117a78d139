"""doc-indexer's pipeline: plain, typed functions in layers, each importing only those below it.

    core     records, failure reasons, options, offline environment   (no Prefect, no LanceDB)
    text     splitting and full-text analysis                          (core)
    embed    embedding backends behind one protocol                    (core)
    parse    reading documents: readers, decoding, OCR, metadata, the parser process (core)
    dataset  the LanceDB dataset: schema, location, one Dataset object (core, text)
    ingest   discover → load → split → embed → write, and their Prefect task wrappers
    search   search modes, filters, fusion, snippets                   (core, text, embed, dataset)
    eval     retrieval metrics                                         (core)

`flows/` (the Prefect flows and command lines) sits on top; tests/test_layers.py checks the
order and that there are no import cycles. Importing the package first sets up the offline
environment (tasks/core/offline.py) and lets LanceDB import without its REST namespace
client's cost (tasks/core/lance_imports.py).
"""

from tasks.core import lance_imports, offline  # noqa: F401

lance_imports.install()
