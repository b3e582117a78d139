"""Re-indexing only what changed: discovery, planning, run tags, store hygiene, locking."""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import replace
from pathlib import Path

import lancedb
import pytest

import tasks.dataset.upkeep as upkeep_module
import tasks.ingest.discover as discover_module
from tasks.core.reasons import Reason, Status
from tasks.core.records import Block, Document, LedgerEntry, SourceFile
from tasks.dataset.dataset import Dataset
from tasks.dataset.location import DatasetError
from tasks.dataset.schema import CHUNKS_TABLE, DOCUMENTS_TABLE, Fingerprint
from tasks.dataset.upkeep import KEEP_RUN_TAGS
from tasks.embed.hash_backend import HashEmbedder
from tasks.ingest.discover import Scan, Waiting, discover, plan_changes
from tasks.ingest.steps import SPLIT_CACHE
from tasks.text.split import SplitSettings, split_document

EMBEDDER = HashEmbedder(16)
SPLIT = SplitSettings(chunk_size=200, chunk_overlap=20)
FP = Fingerprint.of(EMBEDDER.info, SPLIT)


def prepared(uri: str) -> Dataset:
    dataset = Dataset(uri)
    dataset.prepare(FP)
    return dataset


def source(doc_id: str, content_hash: str = "h") -> SourceFile:
    return SourceFile(doc_id, f"/c/{doc_id}", 1, 0, content_hash, "text/markdown")


def entry(content_hash: str = "h", status: str = "indexed", fp: str = "fp") -> LedgerEntry:
    return LedgerEntry(content_hash, Status(status), fp)


def test_plan_indexes_new_changed_failed_and_refingerprinted_files():
    scan = Scan(
        (
            source("same"),
            source("new"),
            source("edited", "h2"),
            source("broke"),
            source("old-fp"),
            source("unreadable", ""),
        )
    )
    ledger = {
        "same": entry(),
        "edited": entry("h1"),
        "broke": entry(status="failed"),
        "old-fp": entry(fp="other"),
        "unreadable": entry(),
        "gone": entry(),
    }
    plan = plan_changes(scan, ledger, "fp")
    assert [s.doc_id for s in plan.unchanged] == ["same"]
    assert sorted(s.doc_id for s in plan.to_index) == [
        "broke",
        "edited",
        "new",
        "old-fp",
        "unreadable",
    ]
    assert plan.removed == ("gone",)


HOUR_US = 3600 * 10**6


def test_an_unchanged_failed_file_waits_for_its_back_off():
    """Tried by the next run after its first failure, then 1, 2, 4, ... hours after its last
    attempt, at most a day apart; at once when its bytes or the pipeline changed, or when the
    run retries every failed file."""

    def failed(attempts: int, content_hash: str = "h", fp: str = "fp") -> LedgerEntry:
        return LedgerEntry(
            content_hash, Status.FAILED, fp, reason=Reason.NOT_A_PDF, attempts=attempts
        )  # recorded_us: its last attempt, at 0 here

    def planned(entry: LedgerEntry, now_us: int, retry_failed: bool = False) -> str:
        ledger = {"x.pdf": replace(entry, recorded_us=0)}
        plan = plan_changes(
            Scan((source("x.pdf"),)), ledger, "fp", frozenset(), retry_failed, now_us
        )
        assert not plan.unchanged and plan.files_seen == 1
        return "waits" if plan.waiting else "tried"

    assert planned(failed(1), now_us=1) == "tried"
    assert planned(failed(2), now_us=HOUR_US - 1) == "waits"
    assert planned(failed(2), now_us=HOUR_US) == "tried"
    assert planned(failed(3), now_us=2 * HOUR_US - 1) == "waits"
    assert planned(failed(6), now_us=16 * HOUR_US) == "tried"
    assert planned(failed(40), now_us=24 * HOUR_US - 1) == "waits"
    assert planned(failed(40), now_us=24 * HOUR_US) == "tried"
    assert planned(failed(2, content_hash="h0"), now_us=1) == "tried", "its bytes changed"
    assert planned(failed(2, fp="other"), now_us=1) == "tried", "another pipeline"
    assert planned(failed(2), now_us=1, retry_failed=True) == "tried"

    ledger = {"x.pdf": replace(failed(2), recorded_us=5)}
    plan = plan_changes(Scan((source("x.pdf"),)), ledger, "fp", now_us=6)
    assert plan.waiting == (Waiting(source("x.pdf"), Reason.NOT_A_PDF, 2, 5 + HOUR_US),)
    assert not plan.changes and plan.to_index == ()


def test_nothing_under_an_unreadable_folder_is_removed():
    scan = Scan((source("a/x.md"),), unreadable_dirs=("b",))
    plan = plan_changes(
        scan, {"a/x.md": entry(), "a/y.md": entry(), "b/z.md": entry(), "bb.md": entry()}, "fp"
    )
    assert plan.removed == ("a/y.md", "bb.md")
    assert plan.kept_unseen == ("b/z.md",)
    root_unreadable = plan_changes(Scan((), unreadable_dirs=("",)), {"a.md": entry()}, "fp")
    assert root_unreadable.removed == () and root_unreadable.kept_unseen == ("a.md",)


def test_discover_reports_folders_it_cannot_list(tmp_path, monkeypatch):
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "a.md").write_text("a", "utf-8")
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "b.md").write_text("b", "utf-8")
    real_walk = os.walk

    def walk_with_denied_folder(top, onerror=None, **kwargs):
        for folder, dirs, files in real_walk(top, onerror=onerror, **kwargs):
            if Path(folder).name == "locked":
                onerror(PermissionError(13, "Permission denied", folder))
                continue
            yield folder, dirs, files

    monkeypatch.setattr(discover_module.os, "walk", walk_with_denied_folder)
    scan = discover(tmp_path)
    assert [f.doc_id for f in scan.files] == ["ok/a.md"]
    assert scan.unreadable_dirs == ("locked",)


def test_size_and_mtime_fast_path_skips_hashing(tmp_path, monkeypatch):
    (tmp_path / "a.md").write_text("alpha", "utf-8")
    (tmp_path / "b.md").write_text("beta", "utf-8")
    first = {f.doc_id: f for f in discover(tmp_path).files}
    known = {
        d: LedgerEntry(f.content_hash, Status.INDEXED, "fp", f.size, f.mtime_us)
        for d, f in first.items()
    }
    (tmp_path / "b.md").write_text("beta, edited", "utf-8")
    hashed = []
    real_hash = discover_module.file_sha256
    monkeypatch.setattr(
        discover_module, "file_sha256", lambda p: hashed.append(Path(p).name) or real_hash(p)
    )
    second = {f.doc_id: f for f in discover(tmp_path, known).files}
    assert hashed == ["b.md"]
    assert second["a.md"].content_hash == first["a.md"].content_hash
    assert second["b.md"].content_hash != first["b.md"].content_hash


def test_ledger_round_trips_size_and_exact_mtime(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nText.", "utf-8")
    found = discover(tmp_path / "docs").files[0]
    dataset = prepared(str(tmp_path / "index"))
    dataset.write_batch([Document(found, "A", (Block("Text."),))], [], EMBEDDER.encode([]))
    ledger = dataset.ledger()["a.md"]
    assert (ledger.size, ledger.mtime_us) == (found.size, found.mtime_us)


def _write_version(dataset: Dataset, text: str) -> None:
    doc = Document(source("a.md", text), "A", (Block(text, "A", 1),))
    chunks = list(split_document(doc, SPLIT).chunks)
    dataset.write_batch([doc], chunks, EMBEDDER.encode([c.text for c in chunks]))


def _texts(uri: str) -> list[str]:
    return [r["text"] for r in lancedb.connect(uri).open_table(CHUNKS_TABLE).to_arrow().to_pylist()]


def test_run_tags_name_versions_that_can_be_restored(tmp_path):
    uri = str(tmp_path / "index")
    dataset = prepared(uri)
    assert not dataset.is_finalized()
    _write_version(dataset, "First version.")
    dataset.finalize("run-1")
    assert dataset.is_finalized()
    _write_version(dataset, "Second version.")
    assert not dataset.is_finalized(), "a write since the last run tag"
    dataset.finalize("run-2")
    assert list(dataset.run_tags()) == ["run-1", "run-2"]
    dataset.restore("run-1")
    assert _texts(uri) == ["First version."]
    assert Dataset(uri).ledger()["a.md"].content_hash == "First version."
    with pytest.raises(DatasetError, match="no tag 'run-9'"):
        Dataset(uri).restore("run-9")


def test_a_run_that_changes_the_ledger_alone_makes_no_run_tag(tmp_path):
    """A failed file recorded again changes no chunk: no new tag (it would name the same
    chunks as the last one); the newest tag moves to the ledger's version, so the dataset is
    finalized again and every kept tag names another state."""
    uri = str(tmp_path / "index")
    dataset = prepared(uri)
    _write_version(dataset, "First version.")
    dataset.finalize("run-1")
    dataset.record_failed([Document.not_indexed(source("x.pdf"), Reason.NOT_A_PDF, "no header")])
    assert not dataset.chunks_changed() and not dataset.is_finalized()
    dataset.finalize_ledger()
    assert dataset.is_finalized() and list(dataset.run_tags()) == ["run-1"]
    _write_version(dataset, "Second version.")
    assert dataset.chunks_changed()
    dataset.finalize("run-2")
    for table in (dataset.chunks, dataset.documents):
        versions = [tag["version"] for tag in table.tags.list().values()]
        assert len(set(versions)) == len(versions) == 2
    dataset.restore("run-1")
    assert _texts(uri) == ["First version."]
    assert Dataset(uri).ledger()["x.pdf"].status == Status.FAILED


def _file_count(path: str) -> int:
    return sum(len(files) for _, _, files in os.walk(path))


@pytest.mark.integration
@pytest.mark.filterwarnings("ignore:optimize\\(cleanup_older_than=0\\)")
def test_versions_and_files_stay_bounded_over_50_small_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(upkeep_module, "MIN_VERSION_AGE", __import__("datetime").timedelta(0))
    uri = str(tmp_path / "index")
    dataset = prepared(uri)
    for name in ("b.md", "c.md"):
        doc = Document(source(name), name, (Block(f"Stable text of {name}."),))
        dataset.write_batch(
            [doc],
            list(split_document(doc, SPLIT).chunks),
            EMBEDDER.encode([f"Stable text of {name}."]),
        )
    counts = []
    for run in range(1, 51):
        _write_version(dataset, f"Edit number {run}.")
        dataset.finalize(f"run-{run:03d}")
        table = lancedb.connect(uri).open_table(CHUNKS_TABLE)
        counts.append((run, len(table.list_versions()), _file_count(uri)))
    with capsys.disabled():
        print(
            "\nrun, chunks-table versions, files in dataset:",
            counts[0],
            counts[9],
            counts[24],
            counts[49],
        )
    assert len(dataset.run_tags()) == KEEP_RUN_TAGS
    # Bounded: once the first runs fill the retention window (10 tags, plus versions younger
    # than a fraction of a second), the counts stop growing.
    first_half, second_half = counts[:25], counts[25:]
    assert max(c[1] for c in second_half) <= 1.25 * max(c[1] for c in first_half) + 6, counts
    assert max(c[2] for c in second_half) <= 1.25 * max(c[2] for c in first_half) + 60, counts
    assert sorted(_texts(uri)) == [
        "Edit number 50.",
        "Stable text of b.md.",
        "Stable text of c.md.",
    ]


def test_key_indexes_exist_before_the_first_merge(tmp_path):
    uri = str(tmp_path / "index")
    prepared(uri)
    db = lancedb.connect(uri)
    chunk_keys = {c for index in db.open_table(CHUNKS_TABLE).list_indices() for c in index.columns}
    doc_keys = {c for index in db.open_table(DOCUMENTS_TABLE).list_indices() for c in index.columns}
    assert {"chunk_id", "doc_id", "text_hash"} <= chunk_keys and "doc_id" in doc_keys


def test_a_second_run_waits_for_the_dataset_lock(tmp_path, caplog):
    dataset = Dataset(str(tmp_path / "index"))
    logger = logging.getLogger("test-lock")
    order = []
    with dataset.lock(timeout=5, logger=logger):
        with pytest.raises(DatasetError, match="another ingest run is still writing"):
            with dataset.lock(timeout=0.2, logger=logger):
                pass

        def second_run():
            with Dataset(dataset.uri).lock(timeout=30, logger=logger):
                order.append("second")

        waiter = threading.Thread(target=second_run)
        waiter.start()
        time.sleep(0.5)
        order.append("first done")
    waiter.join(10)
    assert order == ["first done", "second"]
    assert "another ingest run holds" in caplog.text


def test_split_cache_key_changes_with_settings_and_code(monkeypatch):
    doc = Document(source("a.md"), "A", (Block("Text."),))

    def key(settings):
        return SPLIT_CACHE.compute_key(
            None, {"documents": [doc], "settings": settings, "model": "hash:16"}, {}
        )

    base = key(SplitSettings(chunk_size=200, chunk_overlap=20))
    assert key(SplitSettings(chunk_size=200, chunk_overlap=20)) == base
    assert key(SplitSettings(chunk_size=300, chunk_overlap=20)) != base
    monkeypatch.setattr(
        "tasks.ingest.cache_keys.code_version", lambda *args: "edited splitter source"
    )
    assert key(SplitSettings(chunk_size=200, chunk_overlap=20)) != base
