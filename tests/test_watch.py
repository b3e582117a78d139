"""Live folders: a scan restricted to changed paths, file events turned into those paths, and
the watcher's runs through the real `ingest` flow (Prefect test server, LanceDB; the hash
embedder, since these tests look for words, not meaning)."""

from __future__ import annotations

import queue
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from filelock import FileLock

import tasks.ingest.discover as discover_module
from flows.watch import WatchRun, ingest_runner, watch_folder
from tasks.core.reasons import Status
from tasks.core.records import LedgerEntry
from tasks.dataset.dataset import Dataset
from tasks.dataset.location import lock_file
from tasks.ingest.discover import ScanSettings, discover, plan_run
from tasks.ingest.settings import IngestSettings
from tasks.ingest.watch import (
    ChangeQueue,
    FolderWatcher,
    WatchSettings,
    changed_path,
    keep_live,
)
from tasks.search.params import SearchParams
from tasks.search.searcher import Searcher

from .conftest import SAMPLE

MODEL = "hash:64"
SETTLE_S = 60  # a change reflected in search, or the test fails (never a timing assertion)


# -- the restricted scan ----------------------------------------------------------------------


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, "utf-8")
    return path


def ledger_of(root: Path) -> dict[str, LedgerEntry]:
    """What a run that indexed every file under `root` would have recorded."""
    return {
        f.doc_id: LedgerEntry(f.content_hash, Status.INDEXED, "fp", f.size, f.mtime_us)
        for f in discover(root).files
    }


def test_a_restricted_scan_sees_only_its_paths_and_removes_only_under_them(tmp_path, monkeypatch):
    for name in ("gone/a.md", "gone/deep/b.md", "kept.md", "notes/old.md", "notes/other.md"):
        write(tmp_path / name, f"text of {name}")
    ledger = ledger_of(tmp_path)
    shutil.rmtree(tmp_path / "gone")  # a folder deleted
    (tmp_path / "notes/old.md").rename(tmp_path / "notes/new.md")  # a file moved
    write(tmp_path / "kept.md", "edited, but not among the paths")  # an unrelated change
    hashed: list[str] = []
    real_hash = discover_module.file_sha256
    monkeypatch.setattr(
        discover_module, "file_sha256", lambda p: hashed.append(Path(p).name) or real_hash(p)
    )
    scan = ScanSettings(paths=["gone", "notes/old.md", "notes/new.md"])
    plan = plan_run(tmp_path, ledger, scan, "fp")
    assert plan.removed == ("gone/a.md", "gone/deep/b.md", "notes/old.md")
    assert [f.doc_id for f in plan.to_index] == ["notes/new.md"]  # the move: removed + added
    assert plan.unchanged == () and plan.files_seen == 1  # kept.md and notes/other.md unseen
    assert hashed == ["new.md"]
    assert plan.scope == ("gone", "notes/new.md", "notes/old.md")
    assert "scan restricted to 3 paths" in plan.describe()
    whole = plan_run(tmp_path, ledger, ScanSettings(), "fp")  # what a full scan would say
    assert {f.doc_id for f in whole.to_index} == {"notes/new.md", "kept.md"}
    assert set(whole.removed) == set(plan.removed)


def test_a_restricted_scan_follows_the_rules_of_a_whole_scan(tmp_path):
    write(tmp_path / "a/one.md", "one")
    write(tmp_path / "a/two.md", "two")
    write(tmp_path / ".hidden/secret.md", "hidden")
    write(tmp_path / "a/.swap.md", "hidden file")
    write(tmp_path / "image.png", "not a document")
    (tmp_path / "linked").symlink_to(tmp_path / "a", target_is_directory=True)
    ledger = ledger_of(tmp_path)
    assert set(ledger) == {"a/one.md", "a/two.md"}

    def seen(*paths: str) -> list[str]:
        return [f.doc_id for f in discover(tmp_path, ledger, ScanSettings(paths=list(paths))).files]

    assert seen("a", "a/one.md") == ["a/one.md", "a/two.md"]  # a folder covers its files
    assert seen(".hidden/secret.md", "a/.swap.md", "image.png", "linked", "linked/one.md") == []
    assert seen("") == seen(".") == ["a/one.md", "a/two.md"]  # the folder itself: everything
    assert [f.doc_id for f in discover(tmp_path, ledger, ScanSettings(paths=[])).files] == []
    included = ScanSettings(paths=["a"], include=["*/two.md"])
    assert [f.doc_id for f in discover(tmp_path, ledger, included).files] == ["a/two.md"]


@pytest.mark.parametrize("path", ["/etc/passwd", "../outside.md", "a/../../b.md"])
def test_a_path_outside_the_folder_is_refused(path):
    with pytest.raises(ValueError, match="not a path inside the folder"):
        ScanSettings(paths=[path])


def test_paths_are_normalised():
    assert ScanSettings(paths=["./a/", "b//c.md", "."]).paths == ["a", "b/c.md", ""]


# -- file events ------------------------------------------------------------------------------


def test_events_of_hidden_temp_and_unsupported_files_are_dropped(tmp_path):
    write(tmp_path / "image.png", "x")
    write(tmp_path / "folder/doc.md", "x")
    scan = ScanSettings(exclude=["drafts"])
    kept = {
        name: changed_path(tmp_path, str(tmp_path / name), scan)
        for name in (
            "folder/doc.md",
            "folder",  # a folder: what lies under it
            "deleted-folder",  # gone: the ledger says what was under it
            "doc.html",
            ".git/index",
            "folder/.doc.md.swp",
            "doc.md~",
            "~$report.docx",
            "drafts/doc.md",
            "image.png",
        )
    }
    assert kept == {
        "folder/doc.md": "folder/doc.md",
        "folder": "folder",
        "deleted-folder": "deleted-folder",
        "doc.html": "doc.html",
        ".git/index": None,
        "folder/.doc.md.swp": None,
        "doc.md~": None,
        "~$report.docx": None,
        "drafts/doc.md": None,
        "image.png": None,
    }
    assert changed_path(tmp_path, str(tmp_path), scan) == ""
    assert changed_path(tmp_path, "/somewhere/else.md", scan) is None


def test_the_queue_coalesces_and_hands_over_everything_at_once():
    changes = ChangeQueue()
    assert changes.take(0.01) == []
    changes.add(["b.md", "a.md"])
    changes.add(["a.md"])
    assert len(changes) == 2
    assert changes.take(0.01) == ["a.md", "b.md"]
    assert changes.take(0.01) == []


def test_a_run_that_raises_keeps_its_paths_for_the_next(tmp_path, monkeypatch):
    monkeypatch.setattr("tasks.ingest.watch.RETRY_S", 0.01)
    watcher = FolderWatcher(tmp_path, ScanSettings(), WatchSettings(), ChangeQueue())
    watcher.start()
    stop = threading.Event()
    calls: list[list[str] | None] = []

    def run(paths: list[str] | None) -> None:
        calls.append(paths)
        if len(calls) == 2:
            write(tmp_path / "b.md", "while the failing run ran")
            time.sleep(1)  # the watcher queues b.md meanwhile
            raise RuntimeError("a crashed run")
        if len(calls) == 3:
            stop.set()

    try:
        write(tmp_path / "a.md", "first")
        time.sleep(0.5)  # queued while the reconcile has not even started
        keep_live(watcher, run, stop, idle_check_s=0.05)
    finally:
        watcher.stop()
    assert calls[0] is None  # the reconcile
    assert calls[1] == ["a.md"]
    assert calls[2] == ["a.md", "b.md"]  # the failed run's path, and what came meanwhile


# -- through the real flow --------------------------------------------------------------------


def hits(uri: str, word: str) -> list[str]:
    """doc_ids of the full-text hits for `word` in the dataset as it is now."""
    params = SearchParams(k=100, mode="fts")
    return sorted({hit.doc_id for hit in Searcher(Dataset(uri)).search(word, params)})


def doc_ids(uri: str) -> set[str]:
    return set(Dataset(uri).ledger())


class Live:
    """A watcher running in a thread on a folder, its finished runs in a queue."""

    def __init__(self, runs: queue.Queue[WatchRun], source: Path, uri: str) -> None:
        self.runs, self.source, self.uri = runs, source, uri

    def settle(self, reflected: Callable[[], bool]) -> list[WatchRun]:
        """The runs that finished until `reflected()` holds (after a run)."""
        done: list[WatchRun] = []
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline:
            try:
                done.append(self.runs.get(timeout=0.5))
            except queue.Empty:
                continue
            if reflected():
                return done
        raise AssertionError(f"not reflected in search after {SETTLE_S} s; runs: {done}")


def corpus(root: Path) -> Path:
    for name in ("ch04-01-what-is-ownership.md", "ch08-03-hash-maps.md"):
        shutil.copyfile(SAMPLE / "rust-book" / name, write(root / name, ""))
    write(root / "guide/install.md", "# Install\n\nThe xylograph installer runs once.\n")
    write(root / "guide/usage.md", "# Usage\n\nThe xylograph command prints a report.\n")
    return root


def settings_for(source: Path, uri: str) -> IngestSettings:
    return IngestSettings(source_dir=str(source), index_uri=uri, model=MODEL)


@pytest.fixture
def live(prefect_backend, tmp_path) -> Iterator[Live]:
    """flows.watch's loop on a small folder, in a thread; the reconcile run is done."""
    source, uri = corpus(tmp_path / "source"), str(tmp_path / "index")
    runs: queue.Queue[WatchRun] = queue.Queue()
    stop = threading.Event()
    errors: list[BaseException] = []

    def watch() -> None:
        try:
            watch_folder(
                settings_for(source, uri), WatchSettings(debounce=0.1), stop, None, runs.put
            )
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors.append(exc)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        first = runs.get(timeout=SETTLE_S)
        assert first.paths is None and first.summary.indexed == 4
        yield Live(runs, source, uri)
    finally:
        stop.set()
        thread.join(SETTLE_S)
    assert not errors, errors


def assert_restricted(runs: list[WatchRun], seen: int, removed: int) -> None:
    """The runs looked only at the changed paths: no run saw an unchanged file."""
    assert all(run.paths is not None for run in runs)
    assert sum(run.summary.files_seen for run in runs) == seen
    assert sum(run.summary.unchanged for run in runs) == 0
    assert sum(run.summary.removed for run in runs) == removed
    assert all(not run.summary.failed for run in runs)


@pytest.mark.integration
def test_each_change_under_the_watcher_is_reflected_in_search_without_a_full_scan(live):
    source, uri = live.source, live.uri
    assert hits(uri, "xylograph") == ["guide/install.md", "guide/usage.md"]

    edited = source / "ch08-03-hash-maps.md"  # an edit
    edited.write_text(edited.read_text("utf-8") + "\n\nQuillwort marmalade.\n", "utf-8")
    runs = live.settle(lambda: hits(uri, "quillwort") == ["ch08-03-hash-maps.md"])
    assert_restricted(runs, seen=1, removed=0)
    assert [run.paths for run in runs] == [["ch08-03-hash-maps.md"]]

    write(source / "notes/new.md", "# New\n\nA zymurgy note.\n")  # a creation, in a new folder
    runs = live.settle(lambda: hits(uri, "zymurgy") == ["notes/new.md"])
    assert_restricted(runs, seen=1, removed=0)

    (source / "notes/new.md").rename(source / "moved.md")  # a move
    runs = live.settle(lambda: hits(uri, "zymurgy") == ["moved.md"])
    assert_restricted(runs, seen=1, removed=1)
    assert "notes/new.md" not in doc_ids(uri)

    (source / "moved.md").unlink()  # a delete
    runs = live.settle(lambda: hits(uri, "zymurgy") == [])
    assert_restricted(runs, seen=0, removed=1)

    (source / "guide").rename(source / "manual")  # a folder renamed
    manual = ["manual/install.md", "manual/usage.md"]
    runs = live.settle(lambda: hits(uri, "xylograph") == manual)
    assert_restricted(runs, seen=2, removed=2)

    shutil.rmtree(source / "manual")  # a folder delete
    runs = live.settle(lambda: hits(uri, "xylograph") == [])
    assert_restricted(runs, seen=0, removed=2)

    (source / ".draft.md").write_text("hidden zymurgy", "utf-8")  # ignored, as a scan does
    (source / "ch04-01-what-is-ownership.md~").write_text("editor backup zymurgy", "utf-8")
    time.sleep(1)
    assert live.runs.empty()
    assert doc_ids(uri) == {"ch04-01-what-is-ownership.md", "ch08-03-hash-maps.md"}
    assert hits(uri, "ownership")  # the untouched document is still found


@pytest.mark.integration
def test_a_burst_during_a_run_is_applied_by_the_next_runs(prefect_backend, tmp_path):
    source, uri = corpus(tmp_path / "source"), str(tmp_path / "index")
    (source / "burst").mkdir()  # watched from the start: each file's event is seen
    settings = settings_for(source, uri)
    changes = ChangeQueue()
    watcher = FolderWatcher(source, ScanSettings(), WatchSettings(debounce=0.1), changes)
    runs: queue.Queue[WatchRun] = queue.Queue()
    real_run = ingest_runner(settings, runs.put)
    started: queue.Queue[list[str] | None] = queue.Queue()

    def run(paths: list[str] | None) -> object:
        started.put(paths)  # the paths are out of the queue: the run has begun
        return real_run(paths)

    stop = threading.Event()
    loop = threading.Thread(target=keep_live, args=(watcher, run, stop, 0.05), daemon=True)
    watcher.start()
    loop.start()
    try:
        assert started.get(timeout=SETTLE_S) is None
        runs.get(timeout=SETTLE_S)  # the reconcile is done
        burst = [f"burst/file-{i:02d}.md" for i in range(40)]
        with FileLock(str(lock_file(uri))):  # the next run starts, then waits for the lock
            edited = source / "ch08-03-hash-maps.md"
            edited.write_text(edited.read_text("utf-8") + "\n\nQuillwort.\n", "utf-8")
            assert started.get(timeout=SETTLE_S) == ["ch08-03-hash-maps.md"]
            for i, name in enumerate(burst):
                write(source / name, f"# Burst {i}\n\nPalimpsest number {i}.\n")
            deadline = time.monotonic() + SETTLE_S
            while len(changes) < len(burst) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(changes) == len(burst)  # queued while the run waits
        first = runs.get(timeout=SETTLE_S)
        assert first.paths == ["ch08-03-hash-maps.md"]
        assert first.summary.files_seen == 1  # the burst's files were on disk, but not its paths
        after: list[WatchRun] = []
        while not set(burst) <= doc_ids(uri):
            after.append(runs.get(timeout=SETTLE_S))
        assert {path for run in after for path in run.paths or ()} == set(burst)
        assert sum(run.summary.indexed for run in after) == len(burst)
        assert sum(run.summary.unchanged for run in after) == 0
        assert hits(uri, "palimpsest") == sorted(burst)
    finally:
        stop.set()
        loop.join(SETTLE_S)
        watcher.stop()
