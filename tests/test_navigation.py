"""Navigation takes no hits: a page's table of contents (its links one after another) is left
out of its chunks, so a question answered by a section finds the section, not the contents
that name it (tasks/parse/elements.py, `navigation`)."""

from __future__ import annotations

import pytest

from tasks.dataset.dataset import Dataset
from tasks.search.params import SearchParams
from tasks.search.searcher import Searcher

from .test_load import TOC_PAGE

pytestmark = pytest.mark.integration


def test_a_table_of_contents_does_not_outrank_the_section_it_points_to(prefect_backend, tmp_path):
    from flows.ingest import ingest

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "dreq.html").write_text(TOC_PAGE, "utf-8")
    uri = str(tmp_path / "index")
    ingest(source_dir=str(docs), index_uri=uri)
    dataset = Dataset(uri)
    texts = dataset.chunks.to_arrow().column("text").to_pylist()
    assert not any("Table of Contents" in text for text in texts)
    assert not any("4.2. copyright" in text and "4.3. changelog" in text for text in texts)
    searcher = Searcher(dataset)
    for mode in ("hybrid", "fts", "vector"):
        hits = searcher.search("changelog", SearchParams(k=3, mode=mode))
        assert hits[0].section.endswith("4.3. changelog"), (mode, hits[0])
