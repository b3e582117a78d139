"""Bad input and failures: every file accounted for, nothing lost, nothing half-written."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import lancedb
import pytest

import tasks.ingest.steps as steps_module
from flows.ingest import ingest
from flows.query_flow import query
from tasks.core.reasons import Reason
from tasks.core.records import SourceFile
from tasks.dataset.schema import CHUNKS_TABLE, DOCUMENTS_TABLE
from tasks.ingest.discover import ScanSettings, discover
from tasks.ingest.load import LoadSettings, load_batch
from tasks.parse.document import ReadOptions
from tasks.parse.worker import ParserPool, ParseWorker

from .commands import run_module
from .conftest import ROOT, SAMPLE, shared_path

pytestmark = pytest.mark.integration

# (path under ../shared/corpus/nasty, expected status, expected reason)
NASTY = [
    ("constructed/empty.md", "empty", "empty_file"),
    ("constructed/empty.html", "empty", "empty_file"),
    ("constructed/empty.pdf", "empty", "empty_file"),
    ("constructed/pdf-named.md", "failed", "not_a_text_document"),
    ("constructed/png-image-named.md", "failed", "not_a_text_document"),
    ("constructed/deb-archive-named.html", "failed", "too_large"),  # 9.4 MiB, limit set to 5
    ("constructed/R-intro-truncated-half.pdf", "failed", "damaged_pdf"),
    ("pdf/encrypted_password/aes-256.pdf", "failed", "encrypted"),
    ("pdf/encrypted_password/rc4-128.pdf", "failed", "encrypted"),
    ("pdf/encrypted_empty_user_password/dmca.pdf", "indexed", None),
    ("pdf/scanned_no_text_layer/ccitt.pdf", "indexed", None),  # read by OCR
    ("pdf/scanned_no_text_layer/jbig2.pdf", "indexed", None),
    ("pdf/huge_page_or_image/poster.pdf", "indexed", None),
    ("pdf/blank_or_no_contents/blank.pdf", "empty", "no_text"),
    ("pdf/broken_or_invalid/bad-direct-root.pdf", "failed", "not_a_pdf"),
    ("pdf/broken_or_invalid/zen_of_python_corrupted.pdf", "indexed", None),
    ("encodings/GB2312/cindychen.com.md", "indexed", None),
    ("encodings/Big5/_ude_1.md", "indexed", None),
    ("encodings/SHIFT_JIS/tamuyou.haun.org.md", "indexed", None),
    ("encodings/EUC-KR/_ude_euc1.md", "indexed", None),
    ("encodings/KOI8-R/newsru.com.md", "indexed", None),
    ("encodings/windows-1251-russian/aif.ru.health.md", "indexed", None),
    ("encodings/UTF-16/bom-utf-16-be.md", "indexed", None),
    ("encodings/UTF-32BE/nobom-utf32be.md", "indexed", None),
    ("encodings/EUC-TW/_ude_euc-tw1.md", "indexed", None),
    ("encodings/iso-8859-1/_ude_1.md", "indexed", None),
]
PHRASES = {
    "encodings/Big5/_ude_1.md": "維基大典",
    "encodings/KOI8-R/newsru.com.md": "Новости",
    "encodings/EUC-TW/_ude_euc-tw1.md": "維基大典",
    "encodings/iso-8859-1/_ude_1.md": "tão bem",
    "pdf/scanned_no_text_layer/ccitt.pdf": "LinnSequencer",
}
LINN_SENTENCE = (
    "The LinnSequencer is a state-of-the-art composition and performance tool for the "
    "professional musician."
)
LINN_SCANS = {
    "pdf/scanned_no_text_layer/ccitt.pdf",
    "pdf/scanned_no_text_layer/jbig2.pdf",
    "pdf/huge_page_or_image/poster.pdf",
}


def rows(uri: str, table: str = CHUNKS_TABLE) -> list[dict]:
    return lancedb.connect(uri).open_table(table).to_arrow().to_pylist()


def chunk_set(uri: str) -> list[tuple[str, str]]:
    return sorted((r["chunk_id"], r["text_hash"]) for r in rows(uri))


def assert_consistent(uri: str) -> None:
    """No duplicate chunks; every document's chunk set is complete and matches the ledger."""
    chunk_rows = rows(uri)
    ids = [r["chunk_id"] for r in chunk_rows]
    assert len(ids) == len(set(ids)), "duplicate chunks"
    ledger = {r["doc_id"]: r for r in rows(uri, DOCUMENTS_TABLE)}
    by_doc: dict[str, list[dict]] = {}
    for row in chunk_rows:
        by_doc.setdefault(row["doc_id"], []).append(row)
    for doc_id, doc_rows in by_doc.items():
        assert {r["chunk_count"] for r in doc_rows} == {len(doc_rows)}, doc_id
        assert ledger[doc_id]["n_chunks"] == len(doc_rows), doc_id


def small_docs(path: Path, n: int = 4) -> Path:
    """Markdown files with unique text (no cache entry from other tests can match)."""
    path.mkdir(parents=True)
    token = uuid.uuid4().hex[:12]
    for i in range(n):
        body = "\n\n".join(f"Paragraph {j} of file {i}, marker {token}. " * 6 for j in range(6))
        (path / f"doc{i}.md").write_text(f"# File {i}\n\n{body}\n", "utf-8")
    return path


def test_nasty_files_each_end_indexed_empty_or_failed_with_a_reason(prefect_backend, tmp_path):
    corpus = tmp_path / "nasty"
    for relative, _, _ in NASTY:
        target = corpus / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shared_path("corpus", "nasty", relative), target)
    uri = str(tmp_path / "index")
    state = ingest(source_dir=str(corpus), index_uri=uri, max_file_mb=5, return_state=True)
    summary = state.result()
    ledger = {r["doc_id"]: r for r in rows(uri, DOCUMENTS_TABLE)}
    assert set(ledger) == {relative for relative, _, _ in NASTY}, "every file is in the ledger"
    for relative, status, reason in NASTY:
        entry = ledger[relative]
        assert entry["status"] == status, (relative, entry["error"])
        assert entry["reason"] == reason, (relative, entry["error"])
    n_failed = sum(status == "failed" for _, status, _ in NASTY)
    assert len(summary.failed) == n_failed and state.message == f"{n_failed} file(s) failed"
    for relative, phrase in PHRASES.items():
        assert any(phrase in r["text"] for r in rows(uri) if r["doc_id"] == relative), relative
    # a sentence printed on the scanned brochure (the same page in three files) finds it first
    hit = query(text=LINN_SENTENCE, index_uri=uri, k=1)[0]
    assert hit.doc_id in LINN_SCANS and hit.page_number == 1, hit
    assert_consistent(uri)


def test_filesystem_edge_cases(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "docs").mkdir(parents=True)
    outside.mkdir()
    (root / "docs" / "a.md").write_text("a", "utf-8")
    (outside / "secret.md").write_text("s", "utf-8")
    (root / "docs" / "loop").symlink_to(root, target_is_directory=True)  # a symlink loop
    (root / "docs" / "inside-link.md").symlink_to(root / "docs" / "a.md")
    (root / "docs" / "outside-link.md").symlink_to(outside / "secret.md")
    (root / "docs" / "dangling.md").symlink_to(tmp_path / "nowhere.md")
    for name in (".hidden.md", "~$lock.md", "notes.md~", "x.md.swp", ".DS_Store"):
        (root / "docs" / name).write_text("x", "utf-8")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD.md").write_text("x", "utf-8")
    (root / "drafts").mkdir()
    (root / "drafts" / "wip.md").write_text("x", "utf-8")

    found = [f.doc_id for f in discover(root).files]
    assert found == ["docs/a.md", "docs/inside-link.md", "drafts/wip.md"]
    narrowed = ScanSettings(include=["docs/*"], exclude=["drafts"])
    assert [f.doc_id for f in discover(root, None, narrowed).files] == [
        "docs/a.md",
        "docs/inside-link.md",
    ]


# Seconds a file may take in the two tests below: more than a small file's first parse in a
# fresh process on a loaded machine (about 1 s in CI once; 0.5 s failed it there).
FRESH_FILE_TIMEOUT = 5.0


def never_ends(path: Path) -> None:
    """Make the discovered file at `path` a pipe nobody writes to: reading it blocks until the
    parser is killed, on any machine (a slow PDF took 4-22 s here, too close to the limit)."""
    path.unlink()
    os.mkfifo(path)


def test_vanished_oversized_and_slow_files_fail_alone(tmp_path):
    (tmp_path / "gone.md").write_text("# Gone\n\nSoon deleted.", "utf-8")
    (tmp_path / "big.md").write_text("# Big\n\n" + "word " * 100_000, "utf-8")
    (tmp_path / "stuck.md").write_text("# Stuck\n\nNever read.", "utf-8")
    (tmp_path / "fine.md").write_text("# Fine\n\nStill indexed.", "utf-8")
    sources = {f.doc_id: f for f in discover(tmp_path).files}
    (tmp_path / "gone.md").unlink()
    never_ends(tmp_path / "stuck.md")
    order = ["gone.md", "big.md", "stuck.md", "fine.md"]
    settings = LoadSettings(max_file_mb=400_000 / 2**20, parse_timeout=FRESH_FILE_TIMEOUT)
    docs = {d.doc_id: d for d in load_batch([sources[name] for name in order], settings)}
    assert docs["gone.md"].reason == Reason.VANISHED
    assert docs["big.md"].reason == Reason.TOO_LARGE
    assert docs["stuck.md"].reason == Reason.PARSE_TIMEOUT
    assert docs["fine.md"].status == "indexed", "a fresh parser process took over"


def test_a_parser_process_that_dies_costs_only_its_file(tmp_path):
    shutil.copyfile(SAMPLE / "r-manuals" / "R-data.pdf", tmp_path / "slow.pdf")
    (tmp_path / "fine.md").write_text("# Fine\n\nStill indexed.", "utf-8")
    sources = {f.doc_id: f for f in discover(tmp_path).files}
    worker = ParseWorker()
    worker.start()
    assert worker._process is not None
    threading.Timer(0.3, worker._process.kill).start()  # dies while it parses slow.pdf
    crashed = worker.load(sources["slow.pdf"], ReadOptions(), timeout=600)
    assert crashed.reason == Reason.PARSE_CRASH, crashed.error
    fine = worker.load(sources["fine.md"], ReadOptions(), timeout=600)
    assert fine.status == "indexed", "a fresh parser process took over"


def test_files_sent_ahead_of_a_dying_parser_go_to_a_fresh_one(tmp_path):
    """A worker gets the next file before it answers the current one (AHEAD): when it dies
    on a file or overruns it, only that file fails; the file sent after it is parsed by a
    fresh process, and every file keeps its number."""
    for name in ("a", "stuck", "b", "c"):
        (tmp_path / f"{name}.md").write_text(f"# {name}\n\nStill indexed.", "utf-8")
    sources = {f.doc_id: f for f in discover(tmp_path).files}
    never_ends(tmp_path / "stuck.md")
    order = ["a.md", "stuck.md", "b.md", "c.md"]
    worker = ParseWorker()
    # A first Markdown file can take a second in a fresh process (cold disk, busy machine):
    # read one first, so that the kill below lands on stuck.md, not on a.md.
    assert worker.load(sources["c.md"], ReadOptions(), timeout=600).status == "indexed"
    assert worker._process is not None
    threading.Timer(0.5, worker._process.kill).start()  # dies while it waits on stuck.md
    files = iter(enumerate(sources[name] for name in order))
    crashed = worker.load_run(files.__next__, ReadOptions(), timeout=600, files=10)
    timed_out = worker.load_run(
        iter(enumerate(sources[name] for name in order)).__next__,
        ReadOptions(),
        timeout=FRESH_FILE_TIMEOUT,
        files=10,
    )
    for run, reason in ((crashed, Reason.PARSE_CRASH), (timed_out, Reason.PARSE_TIMEOUT)):
        assert [number for number, _ in run] == [0, 1, 2, 3]
        assert [doc.doc_id for _, doc in run] == order
        assert run[1][1].reason == reason, run[1][1].error
        assert [doc.status for _, doc in run if doc.doc_id != "stuck.md"] == ["indexed"] * 3


def test_results_queued_in_the_pipe_are_each_read_whole(tmp_path, monkeypatch):
    """With files sent ahead, results queue up in the pipe while the parent is busy (here:
    a pause after each request): each is read whole and none is mistaken for a timeout (a
    buffered reader once took two results at once, and `select` then waited for the second
    as if it had not come)."""
    from tasks.parse import worker as parse_worker

    send = parse_worker._send

    def send_then_pause(*args):
        send(*args)
        time.sleep(0.05)  # the worker answers the files sent so far meanwhile

    monkeypatch.setattr(parse_worker, "_send", send_then_pause)
    for i in range(20):
        (tmp_path / f"note{i:03d}.md").write_text(f"# Note {i}\n\nText {i}.", "utf-8")
    sources = list(discover(tmp_path).files)
    worker = ParseWorker()
    worker.start()
    run = worker.load_run(iter(enumerate(sources)).__next__, ReadOptions(), 2, len(sources))
    assert [number for number, _ in run] == list(range(len(sources)))
    assert all(doc.status == "indexed" for _, doc in run), {doc.error for _, doc in run}


def test_a_pool_of_parser_processes_loads_a_batch_side_by_side_in_order(tmp_path):
    for i in range(6):
        (tmp_path / f"doc{i}.md").write_text(f"# Doc {i}\n\nBody of document {i}.", "utf-8")
    sources = list(discover(tmp_path).files)
    pool = ParserPool(size=2)
    pool.start()
    assert pool.serving() == 1, "the second worker joins from the first load of several files"
    first = pool.load_all(sources, ReadOptions(), timeout=600)
    deadline = time.monotonic() + 300
    while pool.serving() < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pool.serving() == 2
    second = pool.load_all(sources, ReadOptions(), timeout=600)
    for documents in (first, second):
        assert [doc.doc_id for doc in documents] == [source.doc_id for source in sources]
        assert all(doc.status == "indexed" for doc in documents)
    assert [b.text for b in second[3].blocks] == ["Doc 3", "Body of document 3."]
    assert all(worker._process is not None for worker in pool.workers())


def _parse_from_a_daemon(source: SourceFile, statuses: multiprocessing.Queue) -> None:
    statuses.put(ParseWorker().load(source, ReadOptions(), timeout=600).status)


def test_the_parser_process_starts_from_a_daemonic_process_as_on_dask(tmp_path):
    """Dask's workers are daemonic processes, which may not start multiprocessing children
    (so neither a pool built on multiprocessing, such as pebble's): the parser process is a
    plain subprocess, and loads run on Dask's workers."""
    (tmp_path / "fine.md").write_text("# Fine\n\nParsed on a worker.", "utf-8")
    [source] = discover(tmp_path).files
    context = multiprocessing.get_context("spawn")
    statuses = context.Queue()
    daemon = context.Process(target=_parse_from_a_daemon, args=(source, statuses), daemon=True)
    daemon.start()
    daemon.join(timeout=600)
    assert daemon.exitcode == 0
    assert statuses.get(timeout=10) == "indexed"


def test_thirty_percent_injected_failures_still_give_the_clean_table(
    prefect_backend, tmp_path, monkeypatch
):
    corpus = small_docs(tmp_path / "docs", n=6)
    monkeypatch.setenv("DOC_INDEXER_FAULTS", "load=0.3,embed=0.3,write=0.3")
    faulty = ingest(source_dir=str(corpus), index_uri=str(tmp_path / "faulty"), batch_size=2)
    monkeypatch.delenv("DOC_INDEXER_FAULTS")
    clean = ingest(source_dir=str(corpus), index_uri=str(tmp_path / "clean"), batch_size=2)
    assert faulty.failed == [] and faulty.indexed == clean.indexed == 6
    assert chunk_set(str(tmp_path / "faulty")) == chunk_set(str(tmp_path / "clean"))


def test_a_batch_that_keeps_failing_marks_only_its_documents(
    prefect_backend, tmp_path, monkeypatch
):
    corpus = small_docs(tmp_path / "docs", n=4)
    uri = str(tmp_path / "index")
    real_get = steps_module.get_embedder

    class Broken:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def encode(self, texts):
            if any("File 2" in t for t in texts):
                raise RuntimeError("model server unavailable")
            return self.inner.encode(texts)

    monkeypatch.setattr(
        steps_module, "get_embedder", lambda spec="all-MiniLM-L6-v2": Broken(real_get(spec))
    )
    monkeypatch.setattr(steps_module.embed_task, "retries", 0)
    state = ingest(source_dir=str(corpus), index_uri=uri, batch_size=2, return_state=True)
    summary = state.result()
    assert state.is_completed() and state.message == "2 file(s) failed"
    assert sorted(problem.doc_id for problem in summary.failed) == ["doc2.md", "doc3.md"]
    ledger = {r["doc_id"]: r for r in rows(uri, DOCUMENTS_TABLE)}
    assert [ledger[d]["status"] for d in sorted(ledger)] == [
        "indexed",
        "indexed",
        "failed",
        "failed",
    ]
    assert ledger["doc2.md"]["attempts"] == 1 and ledger["doc2.md"]["reason"] == "batch_failed"

    monkeypatch.setattr(steps_module, "get_embedder", real_get)
    again = ingest(source_dir=str(corpus), index_uri=uri, batch_size=2)
    assert (again.indexed, again.unchanged, again.failed) == (2, 2, [])
    assert {r["attempts"] for r in rows(uri, DOCUMENTS_TABLE)} == {0}
    assert_consistent(uri)


def test_a_broken_file_keeps_the_restore_history_and_waits_for_its_retry(subprocess_env, tmp_path):
    """Seven command runs without a Prefect API over a folder with one broken PDF: the first
    is tagged; the second tries the PDF again and changes no chunk, so it makes no tag; runs
    3 to 6 find the PDF waiting for its back-off: nothing to do, so no flow run, no parse (its
    attempts stay), no tag; the seventh, with an edit and --retry-failed, tries it and is
    tagged. No two tags name one version, and the first run's state can still be restored."""
    from flows import restore as restore_cli
    from tasks.dataset.dataset import Dataset

    corpus, uri = tmp_path / "docs", str(tmp_path / "index")
    corpus.mkdir()
    (corpus / "note.md").write_text("# Note\n\nThe kettle is made of copper.\n", "utf-8")
    (corpus / "x.pdf").write_bytes(uuid.uuid4().bytes * 8)  # garbage with a .pdf name
    env = {k: v for k, v in subprocess_env.items() if k != "PREFECT_API_URL"}
    env["PREFECT_HOME"] = str(tmp_path / "prefect")  # no API: a command's own server

    def ingest_command(*options: str) -> subprocess.CompletedProcess[str]:
        return run_module(
            "flows.ingest", str(corpus), "--index", uri, "--model", "hash", *options, env=env
        )

    def attempts() -> int:
        return next(r["attempts"] for r in rows(uri, DOCUMENTS_TABLE) if r["doc_id"] == "x.pdf")

    first = ingest_command()
    assert first.returncode == 2 and "failed: x.pdf: not_a_pdf" in first.stdout, first.stderr
    [first_tag] = Dataset(uri).run_tags()
    second = ingest_command()
    assert second.returncode == 2 and attempts() == 2, second.stderr[-3000:]
    assert "tag none" in second.stdout and list(Dataset(uri).run_tags()) == [first_tag]
    for _ in range(3, 7):
        waiting = ingest_command()
        assert waiting.returncode == 0, waiting.stderr[-3000:]
        assert "nothing changed: no flow run recorded" in waiting.stderr
        assert "waiting: x.pdf: not_a_pdf: failed 2 times in a row" in waiting.stdout
    assert attempts() == 2, "the unchanged broken file was not parsed again"
    assert list(Dataset(uri).run_tags()) == [first_tag]

    (corpus / "note.md").write_text("# Note\n\nThe kettle is made of brass.\n", "utf-8")
    forced = ingest_command("--retry-failed")
    assert forced.returncode == 2 and attempts() == 3, forced.stderr[-3000:]
    assert len(Dataset(uri).run_tags()) == 2
    for table in (CHUNKS_TABLE, DOCUMENTS_TABLE):
        versions = [
            t["version"] for t in lancedb.connect(uri).open_table(table).tags.list().values()
        ]
        assert len(set(versions)) == len(versions), f"two tags name one {table} version"
    assert restore_cli.main([first_tag, "--index", uri]) == 0
    assert [r["text"] for r in rows(uri)] == ["Note\n\nThe kettle is made of copper."]


def run_ingest(
    corpus: Path, uri: str, env: dict[str, str], *options: str, **extra_env: str
):  # one file per batch; each batch its own commit unless `options` say otherwise
    return run_module(
        "flows.ingest", str(corpus), "--index", uri, "--model", "hash",
        "--batch-size", "1", "--parse-timeout", "0", "--commit-chunks", "1", *options,
        env={**env, **extra_env},
    )  # fmt: skip


# A small doc is 2 chunks: with --commit-chunks 4, batches are written two by two, and
# "write:2" kills the run between the second grouped commit's chunks and its ledger rows.
GROUPED = ("--commit-chunks", "4")
KILLS = {  # id: (crash point, more options)
    "load": ("load:2", ()),
    "embed": ("embed:2", ()),
    "write": ("write:2", ()),
    "grouped-write": ("write:2", GROUPED),
}
PARALLEL = 2  # kill-and-resume runs at once: each is one busy process at a time


def own_results(env: dict[str, str], folder: Path) -> dict[str, str]:
    """`env` with Prefect's result storage (and so its task cache) in `folder`: runs of the
    same files elsewhere cannot answer a step of these runs from their cache."""
    return {**env, "PREFECT_LOCAL_STORAGE_PATH": str(folder)}


@pytest.fixture(scope="module")
def kill_corpus(tmp_path_factory) -> Path:
    """Six small documents that every kill point and the two-runs test index."""
    return small_docs(tmp_path_factory.mktemp("kill-corpus") / "docs", n=6)


@pytest.fixture(scope="module")
def clean_table(subprocess_env, kill_corpus, tmp_path_factory) -> list[tuple[str, str]]:
    """kill_corpus indexed once without a kill, with results of its own: the chunk set that
    each killed-then-resumed run and the two runs at once must end with."""
    root = tmp_path_factory.mktemp("clean")
    clean = run_ingest(kill_corpus, str(root / "index"), own_results(subprocess_env, root / "r"))
    assert clean.returncode == 0, clean.stderr[-2000:]
    return chunk_set(str(root / "index"))


@dataclass(frozen=True)
class Killed:
    """A run killed at a crash point, what it left behind, and the run that resumed it."""

    uri: str
    crashed: subprocess.CompletedProcess[str]
    chunk_docs: int | None  # documents with chunks right after the kill (None: no dataset)
    ledger_rows: int | None  # ledger rows right after the kill
    rerun: subprocess.CompletedProcess[str]


def kill_and_resume(corpus: Path, root: Path, env: dict[str, str], kill: str) -> Killed:
    """The ingest killed at KILLS[kill], then run again to the end. The two share a result
    storage no other run uses: a step served from another run's cache would not reach its
    crash point."""
    point, options = KILLS[kill]
    uri, env = str(root / "index"), own_results(env, root / "results")
    crashed = run_ingest(corpus, uri, env, *options, DOC_INDEXER_CRASH=point)
    try:
        chunk_docs = len({row["doc_id"] for row in rows(uri, CHUNKS_TABLE)})
        ledger_rows: int | None = len(rows(uri, DOCUMENTS_TABLE))
    except (FileNotFoundError, ValueError):  # killed before the dataset was made
        chunk_docs = ledger_rows = None
    rerun = run_ingest(corpus, uri, env, *options)
    return Killed(uri, crashed, chunk_docs, ledger_rows, rerun)


@pytest.fixture(scope="module")
def killed_runs(
    request, subprocess_env, kill_corpus, tmp_path_factory
) -> Iterator[dict[str, Future[Killed]]]:
    """The kill and resume of each kill point whose test was collected, all submitted at once
    and run PARALLEL at a time (each on a dataset and result storage of its own)."""
    wanted = {
        item.callspec.params.get("kill")
        for item in request.session.items
        if getattr(item, "module", None) is request.module and hasattr(item, "callspec")
    }
    pool = ThreadPoolExecutor(PARALLEL)
    try:
        yield {
            kill: pool.submit(
                kill_and_resume,
                kill_corpus,
                tmp_path_factory.mktemp(f"kill-{kill}"),
                subprocess_env,
                kill,
            )
            for kill in KILLS
            if kill in wanted
        }
    finally:
        pool.shutdown(cancel_futures=True)


@pytest.mark.parametrize("kill", KILLS)
def test_sigkill_at_any_point_then_rerun_equals_a_clean_run(killed_runs, clean_table, kill):
    killed = killed_runs[kill].result()
    crashed, uri = killed.crashed, killed.uri
    assert crashed.returncode == -9, crashed.stderr[-2000:]
    if KILLS[kill][1] == GROUPED:
        # killed inside the second commit: the first group's four documents are in
        assert "[batches 1-2/6] 2 documents" in crashed.stderr, crashed.stderr[-3000:]
        assert killed.chunk_docs == 4
        assert killed.ledger_rows == 2, "the ledger lags the killed commit"
    assert killed.rerun.returncode == 0, killed.rerun.stderr[-2000:]
    assert chunk_set(uri) == clean_table
    assert_consistent(uri)
    assert {r["status"] for r in rows(uri, DOCUMENTS_TABLE)} == {"indexed"}


def test_two_runs_at_once_serialise_and_leave_the_clean_table(
    subprocess_env, kill_corpus, clean_table, tmp_path
):
    corpus, uri = kill_corpus, str(tmp_path / "index")
    args = [sys.executable, "-m", "flows.ingest", str(corpus), "--index", uri, "--model", "hash"]
    runs = [
        subprocess.Popen(
            args,
            cwd=ROOT,
            env=subprocess_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=600) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], [err[-1500:] for _, err in outputs]
    assert chunk_set(uri) == clean_table
    assert_consistent(uri)


WRITER = """
import sys, time
from pathlib import Path
from flows.ingest import ingest
from flows.query_flow import query

corpus, uri, rounds = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
for n in range(rounds):
    for i, path in enumerate(sorted(corpus.glob("*.md"))):
        paragraphs = (n + i) % 5 + 1  # every round changes every document's chunk count
        body = "\\n\\n".join(f"Round {n}, part {p} of {path.stem}. " * 8 for p in range(paragraphs))
        path.write_text(f"# {path.stem}\\n\\n{body}\\n", "utf-8")
    ingest(source_dir=str(corpus), index_uri=uri, model="hash", chunk_size=200, chunk_overlap=20,
           parse_timeout=0)
print("WRITER-DONE")
"""


def test_readers_never_see_a_partial_document(subprocess_env, tmp_path):
    corpus = small_docs(tmp_path / "docs", n=4)
    uri = str(tmp_path / "index")
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(corpus), uri, "6"],
        cwd=ROOT, env=subprocess_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    checked = versions = 0
    seen_versions = set()
    try:
        while writer.poll() is None:
            db = lancedb.connect(uri)
            try:
                table = db.open_table(CHUNKS_TABLE)
            except ValueError:  # not created yet, or listed before its first version is written
                time.sleep(0.05)
                continue
            snapshot = table.to_arrow().select(["doc_id", "chunk_count"]).to_pylist()
            counts: dict[str, list[int]] = {}
            for row in snapshot:
                counts.setdefault(row["doc_id"], []).append(row["chunk_count"])
            for doc_id, doc_counts in counts.items():
                assert set(doc_counts) == {len(doc_counts)}, (doc_id, doc_counts)
            checked += 1
            seen_versions.add(table.version)
    finally:
        out, err = writer.communicate(timeout=600)
    assert "WRITER-DONE" in out, err[-2000:]
    versions = len(seen_versions)
    print(f"\nreader checked {checked} snapshots across {versions} table versions")
    assert checked > 20 and versions > 3
