"""Documents in an object store: an `s3://` source on moto's S3 server, through the real Prefect
engine and real LanceDB (the hash model: the model is not the point here).

The server counts the GET requests for each object, so the tests see what was read: an
unchanged object never, a changed one once (downloaded, hashed and loaded from one copy).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import obstore
import pytest

from benchmarks.support.s3 import CountingMotoServer
from flows import ingest as ingest_cli
from flows import watch as watch_cli
from flows.audit import audit_index
from flows.ingest import ingest
from tasks.core.reasons import Reason
from tasks.dataset.dataset import Dataset
from tasks.dataset.location import STORAGE_OPTIONS_ENV, connect
from tasks.dataset.object_store import open_store
from tasks.dataset.schema import CHUNKS_TABLE, DOCUMENTS_TABLE
from tasks.ingest.discover import ScanSettings, discover
from tasks.ingest.object_sources import COPIES, discard_copies, error_line, resolve_source

from .commands import own_prefect_home, run_module

BUCKET = "doc-sources"
PDF_TEXT = b"%PDF-1.4 truncated: no objects, no trailer"


@pytest.fixture(scope="module")
def store() -> Iterator[tuple[Any, CountingMotoServer]]:
    """The server with one bucket, its options in DOC_INDEXER_STORAGE_OPTIONS; a boto3 client."""
    server = CountingMotoServer()
    server.start()
    client = server.client()
    client.create_bucket(Bucket=BUCKET)
    variables = server.aws_variables()
    options = {
        "endpoint": server.endpoint,
        "allow_http": True,
        "region": variables["AWS_DEFAULT_REGION"],
        "aws_access_key_id": variables["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": variables["AWS_SECRET_ACCESS_KEY"],
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(STORAGE_OPTIONS_ENV, json.dumps(options))
        yield client, server
    server.stop()


def _put(client: Any, key: str, body: bytes, **extra: Any) -> None:
    client.put_object(Bucket=BUCKET, Key=key, Body=body, **extra)


def _ledger(uri: str) -> dict[str, dict[str, Any]]:
    rows = connect(uri).open_table(DOCUMENTS_TABLE).to_arrow().to_pylist()
    return {row["doc_id"]: row for row in rows}


def _texts(uri: str) -> dict[str, str]:
    rows = connect(uri).open_table(CHUNKS_TABLE).to_arrow().to_pylist()
    return {row["doc_id"]: row["text"] for row in rows}


def _copies_left() -> list[str]:
    return [path.name for path in COPIES.folder().iterdir()]


@pytest.mark.integration
def test_an_s3_prefix_is_indexed_and_kept_in_step_reading_only_what_changed(
    store, prefect_backend, tmp_path
):
    client, server = store
    _put(client, "docs/birds.md", b"# Birds\n\nPuffins nest on cliffs.\n")
    _put(client, "docs/trees/oaks.txt", b"Oaks drop acorns in autumn.\n")
    _put(client, "docs/trees/elms.md", b"# Elms\n\nElms line old avenues.\n")
    _put(client, "docs-other/far.md", b"# Far\n\nNot under the prefix.\n")
    source, uri = f"s3://{BUCKET}/docs/", str(tmp_path / "index")
    server.gets.clear()

    first = ingest(source_dir=source, index_uri=uri, model="hash")
    assert (first.files_seen, first.indexed, first.failed) == (3, 3, [])
    assert _texts(uri) == {
        "birds.md": "Birds\n\nPuffins nest on cliffs.",
        "trees/oaks.txt": "Oaks drop acorns in autumn.",
        "trees/elms.md": "Elms\n\nElms line old avenues.",
    }
    ledger = _ledger(uri)
    assert ledger["trees/oaks.txt"]["source_path"] == f"s3://{BUCKET}/docs/trees/oaks.txt"
    # Each object read once: downloaded and hashed while planning, loaded from that copy.
    assert server.gets == Counter(
        {"docs/birds.md": 1, "docs/trees/oaks.txt": 1, "docs/trees/elms.md": 1}
    )
    assert _copies_left() == [], "the run's copies are deleted when it ends"

    server.gets.clear()
    again = ingest(source_dir=source, index_uri=uri, model="hash")
    assert (again.unchanged, again.indexed, again.removed) == (3, 0, 0)
    assert server.gets == Counter(), "a no-change run reads no object body"

    _put(client, "docs/birds.md", b"# Birds\n\nGannets dive for fish.\n")
    client.delete_object(Bucket=BUCKET, Key="docs/trees/oaks.txt")
    server.gets.clear()
    changed = ingest(source_dir=source, index_uri=uri, model="hash")
    assert (changed.indexed, changed.unchanged, changed.removed) == (1, 1, 1)
    assert server.gets == Counter({"docs/birds.md": 1})
    assert _texts(uri) == {
        "birds.md": "Birds\n\nGannets dive for fish.",
        "trees/elms.md": "Elms\n\nElms line old avenues.",
    }
    assert set(_ledger(uri)) == {"birds.md", "trees/elms.md"}
    assert _copies_left() == []

    report = audit_index(index_uri=uri)  # against the source its ledger records
    assert report.clean and report.source_dir == f"s3://{BUCKET}/docs"
    assert _copies_left() == [], "the audit's downloads are deleted too"


def _listed(source: str, key: str) -> dict[str, Any]:
    """The object as a listing gives it: its size, last-modified time and ETag."""
    return dict(obstore.head(open_store(source), key))


@pytest.mark.integration
def test_an_object_rewritten_within_the_second_it_was_read_is_read_again(
    store, prefect_backend, tmp_path
):
    """S3 dates an object to the second, so one written again with the same size within the
    second a run listed it keeps its size and last-modified time: only its ETag tells. That
    second is made exact here: the ledger is given the new object's last-modified time, as
    the run would have recorded it had it listed the object in the second of the rewrite."""
    client, server = store
    source, uri = f"s3://{BUCKET}/quick", str(tmp_path / "index")
    _put(client, "quick/note.md", b"# Note\n\nThe heron waits by the reeds.\n")
    first = ingest(source_dir=source, index_uri=uri, model="hash")
    assert first.indexed == 1
    _put(client, "quick/note.md", b"# Note\n\nThe egret waits by the reeds.\n")  # same size
    listed = _listed(source, "note.md")
    recorded = _ledger(uri)["note.md"]
    assert recorded["size"] == listed["size"] and recorded["etag"] != listed["e_tag"]
    ledger = connect(uri).open_table(DOCUMENTS_TABLE)
    ledger.update(where="doc_id = 'note.md'", values={"mtime": listed["last_modified"]})

    server.gets.clear()
    again = ingest(source_dir=source, index_uri=uri, model="hash")
    assert (again.indexed, again.unchanged) == (1, 0), "the new ETag: read again"
    assert server.gets == Counter({"quick/note.md": 1})
    hits = Dataset(uri).matching("egret", ["doc_id", "text"], None, 5)
    assert [hit["doc_id"] for hit in hits] == ["note.md"]
    assert Dataset(uri).matching("heron", ["doc_id"], None, 5) == []
    assert _ledger(uri)["note.md"]["etag"] == listed["e_tag"]

    server.gets.clear()
    third = ingest(source_dir=source, index_uri=uri, model="hash")
    assert (third.unchanged, third.indexed, server.gets) == (1, 0, Counter())


@pytest.mark.integration
def test_a_ledger_from_before_etags_compares_as_before_and_gets_them(
    store, prefect_backend, tmp_path
):
    """A dataset made before the ledger's etag column: the next run compares its objects by
    size and last-modified time (reading none), adds the column and records their ETags."""
    client, server = store
    source, uri = f"s3://{BUCKET}/older", str(tmp_path / "index")
    _put(client, "older/a.md", b"# A\n\nAlders grow by rivers.\n")
    _put(client, "older/b.md", b"# B\n\nBirches have white bark.\n")
    first = ingest(source_dir=source, index_uri=uri, model="hash")
    assert first.indexed == 2
    connect(uri).open_table(DOCUMENTS_TABLE).drop_columns(["etag"])  # as an older dataset

    server.gets.clear()
    again = ingest(source_dir=source, index_uri=uri, model="hash")
    assert (again.unchanged, again.indexed, server.gets) == (2, 0, Counter())
    etags = {doc_id: row["etag"] for doc_id, row in _ledger(uri).items()}
    assert etags == {key: _listed(source, key)["e_tag"] for key in ("a.md", "b.md")}
    assert again.run_tag == "", "the ledger alone changed: no new run tag"


@pytest.mark.integration
def test_rules_apply_and_every_bad_object_is_recorded_with_its_reason(
    store, prefect_backend, tmp_path
):
    client, server = store
    _put(client, "mixed/good.md", b"# Good\n\nA readable note.\n")
    _put(client, "mixed/broken.pdf", PDF_TEXT)
    _put(client, "mixed/frozen.md", b"# Frozen\n\nIn the archive tier.\n", StorageClass="GLACIER")
    _put(client, "mixed/.hidden.md", b"# Hidden\n")
    _put(client, "mixed/drafts/wip.md", b"# Draft\n")
    _put(client, "mixed/notes/keep.md", b"# Kept\n\nNotes stay.\n")
    _put(client, "mixed/notes/skip.html", b"<p>not included</p>")
    _put(client, "mixed/data.bin", b"\x00\x01")
    uri = str(tmp_path / "index")
    settings = {"exclude": ["drafts"], "include": ["*.md", "*.pdf"]}

    summary = ingest(source_dir=f"s3://{BUCKET}/mixed", index_uri=uri, model="hash", **settings)
    ledger = _ledger(uri)
    assert set(ledger) == {"good.md", "broken.pdf", "frozen.md", "notes/keep.md"}
    assert summary.indexed == 2
    reasons = {problem.doc_id: problem.reason for problem in summary.failed}
    assert reasons == {"broken.pdf": Reason.DAMAGED_PDF, "frozen.md": Reason.UNREADABLE}
    assert ledger["frozen.md"]["reason"] == "unreadable"
    assert "InvalidObjectState" in ledger["frozen.md"]["error"]
    assert _copies_left() == []


@pytest.mark.integration
def test_an_unreachable_store_is_one_line_naming_the_url(store, prefect_backend, tmp_path, capsys):
    args = ["--index", str(tmp_path / "index"), "--model", "hash"]
    assert ingest_cli.main(["s3://no-such-bucket/docs", *args]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: cannot list the documents at s3://no-such-bucket/docs: ")
    assert err.endswith("NoSuchBucket") and "\n" not in err


@pytest.mark.integration
def test_a_bucket_that_cannot_be_listed_or_watched_stops_the_command_before_a_server(
    store, tmp_path
):
    """The commands check an object-store source before they start Prefect's temporary
    server: the one line that says what is wrong is all they print."""
    env = own_prefect_home(tmp_path / "prefect")  # no API: each would start a server
    env.pop("PREFECT_API_URL", None)
    index = ("--index", str(tmp_path / "index"))
    ingest_run = run_module("flows.ingest", "s3://no-such-bucket/docs", *index, env=env)
    assert ingest_run.returncode == 1, ingest_run.stderr[-3000:]
    [line] = ingest_run.stderr.splitlines()
    assert line.startswith("error: cannot list the documents at s3://no-such-bucket/docs: ")
    assert line.endswith("NoSuchBucket")
    watch_run = run_module("flows.watch", f"s3://{BUCKET}/docs", *index, env=env)
    assert watch_run.returncode == 2
    assert "cannot be watched" in watch_run.stderr
    assert "Prefect server" not in watch_run.stderr


def test_a_scan_of_some_paths_lists_and_reads_only_those(store):
    client, server = store
    for key in ("a.md", "sub/b.md", "sub/c.md", "other/d.md"):
        _put(client, f"scoped/{key}", f"# {key}\n".encode())
    server.gets.clear()
    paths = ScanSettings(paths=["sub", "a.md", "gone.md"])
    scan = discover(f"s3://{BUCKET}/scoped", None, paths)
    assert [source.doc_id for source in scan.files] == ["a.md", "sub/b.md", "sub/c.md"]
    assert scan.scope == ("a.md", "gone.md", "sub")
    assert set(server.gets) == {"scoped/a.md", "scoped/sub/b.md", "scoped/sub/c.md"}
    discard_copies(scan.files)
    assert _copies_left() == []


def test_object_urls_are_taken_as_they_are_and_cannot_be_watched(tmp_path, capsys):
    answer = "Error performing GET in 4ms - 404 Not Found: <?xml ?>\n<Error><Code>NoSuchKey</Code>"
    assert error_line(OSError(answer)) == "Error performing GET in 4ms - 404 Not Found: NoSuchKey"
    assert error_line(OSError("")) == "OSError"
    assert resolve_source("s3://b/docs/") == "s3://b/docs"
    assert resolve_source(f"file://{tmp_path}") == str(tmp_path)
    with pytest.raises(SystemExit) as stop:
        watch_cli.main(["s3://b/docs", "--index", str(tmp_path / "index")])
    assert stop.value.code == 2
    assert "cannot be watched" in capsys.readouterr().err


@pytest.mark.integration
def test_dask_workers_read_their_objects_from_the_store(store, prefect_backend, tmp_path):
    """Workers in other processes have none of the planner's copies: each loads its batch's
    objects itself, so every object is read twice (the plan's hash, the worker's load)."""
    from distributed import LocalCluster

    from flows.runners import RunnerSettings, make_task_runner

    client, server = store
    for name in ("one", "two", "three"):
        _put(client, f"remote/{name}.md", f"# {name}\n\nThe {name} note.\n".encode())
    uri = str(tmp_path / "index")
    server.gets.clear()
    with LocalCluster(
        n_workers=1, processes=True, threads_per_worker=1, dashboard_address=None
    ) as cluster:
        runner = RunnerSettings(task_runner="dask", dask_address=cluster.scheduler_address)
        summary = ingest.with_options(task_runner=make_task_runner(runner))(
            source_dir=f"s3://{BUCKET}/remote", index_uri=uri, model="hash", batch_size=1
        )
    assert (summary.indexed, summary.failed) == (3, [])
    assert _texts(uri)["two.md"] == "two\n\nThe two note."
    assert server.gets == Counter({f"remote/{n}.md": 2 for n in ("one", "two", "three")})
