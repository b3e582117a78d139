"""End to end through the real Prefect engine, real LanceDB, the real model and real loaders."""

from __future__ import annotations

import json

import lancedb
import pytest

from flows.ingest import ingest
from flows.query_flow import query
from tasks.dataset.dataset import Dataset
from tasks.dataset.schema import CHUNKS_TABLE, DOCUMENTS_TABLE
from tasks.embed.models import DEFAULT_MODEL, get_embedder, model_info
from tasks.ingest.discover import discover
from tasks.ingest.load import LoadSettings, load_batch
from tasks.ingest.steps import split_batch
from tasks.search.params import SearchParams
from tasks.search.searcher import Searcher
from tasks.text.split import SplitSettings

from .commands import own_prefect_home, run_module
from .conftest import ROOT, SAMPLE
from .fixtures.sample_rows import read_rows

pytestmark = pytest.mark.integration


def table_rows(uri: str, table: str = CHUNKS_TABLE) -> list[dict]:
    return lancedb.connect(uri).open_table(table).to_arrow().to_pylist()


def test_first_ingest_indexes_every_file_consistently(small_index):
    corpus, uri, summary = small_index
    assert (summary.files_seen, summary.indexed, summary.failed) == (5, 5, [])
    assert summary.chunks_truncated == 0
    rows = table_rows(uri)
    assert summary.chunks_written == len(rows) > 20
    ids = [row["chunk_id"] for row in rows]
    assert len(ids) == len(set(ids)), "no duplicate chunks"
    ledger = {row["doc_id"]: row for row in table_rows(uri, DOCUMENTS_TABLE)}
    for doc_id, entry in ledger.items():
        doc_rows = [row for row in rows if row["doc_id"] == doc_id]
        assert entry["status"] == "indexed"
        assert entry["n_chunks"] == len(doc_rows) == doc_rows[0]["chunk_count"]
        assert sorted(row["chunk_index"] for row in doc_rows) == list(range(len(doc_rows)))
    assert all(len(row["vector"]) == model_info(DEFAULT_MODEL).dimension for row in rows)
    pdf_pages = {row["page_number"] for row in rows if row["doc_id"].endswith(".pdf")}
    assert pdf_pages == {1, 2, 3, 4, 5}


@pytest.mark.parametrize(
    ("doc_id", "needle"),
    [
        ("rust-book/ch08-03-hash-maps.md", "hashing function"),
        ("debian-handbook-zh-cn/sect.apt-file.html", "apt-file"),
        ("r-manuals/R-FAQ-excerpt.pdf", "R is a system for statistical computation and graphics"),
    ],
)
def test_a_sentence_of_a_section_finds_that_section_first(small_index, doc_id, needle):
    _, uri, _ = small_index
    chunk = next(r for r in table_rows(uri) if r["doc_id"] == doc_id and needle in r["text"])
    sentence = next(s for s in chunk["text"].replace("\n", " ").split(". ") if needle in s)
    hits = query(text=sentence, index_uri=uri, k=3)
    assert hits[0].doc_id == doc_id
    assert hits[0].section == chunk["section"] and hits[0].page_number == chunk["page_number"]
    assert needle in hits[0].text
    assert hits[0].score > hits[-1].score or len(hits) == 1


def test_source_glob_restricts_results(small_index):
    _, uri, _ = small_index
    hits = query(text="virtual environments", index_uri=uri, k=5, source="rust-book/*")
    assert hits and all(hit.doc_id.startswith("rust-book/") for hit in hits)


def test_rerun_edit_and_delete_touch_only_what_changed(small_index_copy):
    corpus, uri, _ = small_index_copy
    before = {(r["chunk_id"], r["text_hash"]) for r in table_rows(uri)}

    again = ingest(source_dir=str(corpus), index_uri=uri)
    assert (again.unchanged, again.indexed, again.chunks_written) == (5, 0, 0)
    assert {(r["chunk_id"], r["text_hash"]) for r in table_rows(uri)} == before

    edited = corpus / "rust-book/ch04-01-what-is-ownership.md"
    edited.write_text("# Ownership, rewritten\n\nZebras own their stripes completely.\n", "utf-8")
    (corpus / "python-docs/venv.html").unlink()
    changed = ingest(source_dir=str(corpus), index_uri=uri)
    assert (changed.indexed, changed.unchanged, changed.removed) == (1, 3, 1)
    rows = table_rows(uri)
    ownership = [r["text"] for r in rows if r["doc_id"] == "rust-book/ch04-01-what-is-ownership.md"]
    assert ownership == ["Ownership, rewritten\n\nZebras own their stripes completely."]
    assert not any(r["doc_id"] == "python-docs/venv.html" for r in rows)
    assert "python-docs/venv.html" not in {r["doc_id"] for r in table_rows(uri, DOCUMENTS_TABLE)}
    hits = query(text="zebra stripes", index_uri=uri, k=1)
    assert hits[0].doc_id == "rust-book/ch04-01-what-is-ownership.md"


def test_query_cli_prints_json_hits(small_index, tmp_path):
    _, uri, _ = small_index
    result = run_module(
        "flows.query",
        "What is a hash map?",
        "--index",
        uri,
        "-k",
        "2",
        "--json",
        env=own_prefect_home(tmp_path),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    hits = json.loads(result.stdout)
    assert len(hits) == 2
    fields = {
        "chunk_id",
        "doc_id",
        "source_path",
        "section",
        "page_number",
        "chunk_index",
        "score",
        "text",
    }
    assert all(fields <= hit.keys() for hit in hits)
    assert hits[0]["score"] >= hits[1]["score"]


def test_cli_errors_are_one_line_and_non_zero(tmp_path):
    missing = run_module(
        "flows.query", "anything", "--index", str(tmp_path / "none"), env=own_prefect_home(tmp_path)
    )
    assert missing.returncode == 1
    assert (
        missing.stderr.strip().startswith("error: no index at")
        and "\n" not in missing.stderr.strip()
    )
    assert "Traceback" not in missing.stderr
    bad_k = run_module("flows.query", "anything", "-k", "0", env=own_prefect_home(tmp_path))
    assert (
        bad_k.returncode == 2 and "-k: Input should be greater than or equal to 1" in bad_k.stderr
    )
    bad_dir = run_module("flows.ingest", str(tmp_path / "nowhere"), env=own_prefect_home(tmp_path))
    assert bad_dir.returncode == 2 and "source folder not found" in bad_dir.stderr
    bad_split = run_module(
        "flows.ingest",
        str(tmp_path),
        "--chunk-size",
        "10",
        "--chunk-overlap",
        "10",
        env=own_prefect_home(tmp_path),
    )
    assert bad_split.returncode == 2 and "must be smaller than chunk_size" in bad_split.stderr


def test_ingest_cli_prints_a_summary_and_exits_zero(subprocess_env, tmp_path):
    """Against the session's test server (the command's own temporary server:
    tests/test_everyday_paths.py)."""
    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "a.md").write_text("# A\n\nSome text about caching.\n", "utf-8")
    (corpus / "empty.md").write_text("", "utf-8")
    result = run_module(
        "flows.ingest",
        str(corpus),
        "--index",
        str(tmp_path / "index"),
        "--model",
        "hash",
        env=subprocess_env,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "files: 2 seen, 1 indexed, 0 unchanged, 1 empty, 0 failed, 0 removed" in result.stdout


def test_no_sample_chunk_exceeds_the_model_token_window():
    """Load and split the whole bundled sample with the real tokenizer: nothing is truncated."""
    documents = load_batch(list(discover(SAMPLE).files), LoadSettings())
    assert all(doc.status == "indexed" for doc in documents), [
        d.error for d in documents if d.error
    ]
    results = split_batch(documents, SplitSettings(), "all-MiniLM-L6-v2")
    assert sum(result.over_window for result in results) == 0
    embedder = get_embedder(DEFAULT_MODEL)
    counts = embedder.count_tokens([c.text for r in results for c in r.chunks])
    assert max(counts) <= embedder.info.max_tokens


def test_the_sample_gives_the_rows_it_always_gave(prefect_backend, tmp_path):
    """data/sample ingested now gives the chunk ids, text hashes and vectors recorded in
    tests/fixtures/sample_rows.json (from the code before the restructuring; see that
    module for how to record them again after a deliberate change)."""
    uri = str(tmp_path / "index")
    ingest(source_dir=str(SAMPLE), index_uri=uri, model="all-MiniLM-L6-v2")
    rows = read_rows(uri)
    expected = json.loads((ROOT / "tests" / "fixtures" / "sample_rows.json").read_text("utf-8"))
    assert sorted(rows) == sorted(expected), "the same chunk ids"
    assert {k: v[0] for k, v in rows.items()} == {k: v[0] for k, v in expected.items()}
    worst = max(abs(a - b) for k in rows for a, b in zip(rows[k][1], expected[k][1], strict=True))
    assert worst < 1e-3, f"vectors moved by up to {worst}"


CHINESE = {
    "wall.md": "# 长城\n\n长城是中国古代的军事防御工程，东起山海关，西至嘉峪关，全长数千公里。\n",
    "panda.md": "# 熊猫\n\n大熊猫主要生活在四川的山区，以竹子为主要食物，每天要吃很多竹子。\n",
    "tea.md": "# 茶\n\n茶叶起源于中国，绿茶在加工过程中不经过发酵，保留了较多的天然物质。\n",
}


def test_a_chinese_question_finds_its_paragraph_by_full_text_alone(prefect_backend, tmp_path):
    corpus = tmp_path / "docs"
    corpus.mkdir()
    for name, text in CHINESE.items():
        (corpus / name).write_text(text, "utf-8")
    uri = str(tmp_path / "index")
    ingest(source_dir=str(corpus), index_uri=uri, model="hash")
    searcher = Searcher(Dataset(uri))
    for question, expected in [
        ("大熊猫吃什么食物？", "panda.md"),
        ("长城东边从哪里开始", "wall.md"),
        ("绿茶发酵吗", "tea.md"),
    ]:
        hits = searcher.search(question, SearchParams(k=3, mode="fts"))
        assert hits and hits[0].doc_id == expected, (question, hits)
