# Over 300 lines: the lock object, the Prefect limit and the runs at once share one moto server.
"""The dataset lock across machines (issue 38): runs that write one dataset never overlap.

Against moto's S3 server on 127.0.0.1: the lock object (tasks/dataset/store_lock.py) taken,
renewed, released and taken over only once its lease ran out, by one waiter of two; a timed
out run names the holder. With child processes of `python -m flows.ingest` (hash model, a
tiny corpus): two runs started at once on one `s3://` dataset take turns, with the lock
object (no Prefect API: each command on its temporary server) and with a Prefect global
concurrency limit (the tests' Prefect server, a shared API to the children), and the
dataset equals a single run's.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import obstore
import pytest
from moto.server import ThreadedMotoServer

from tasks.dataset.holders import Holder
from tasks.dataset.location import STORAGE_OPTIONS_ENV, DatasetError, connect, lock_file
from tasks.dataset.lock import LEASE_ENV, ingest_lock, lease_seconds
from tasks.dataset.object_store import open_store
from tasks.dataset.schema import CHUNKS_TABLE, DOCUMENTS_TABLE
from tasks.dataset.store_lock import LOCK_OBJECT, StoreLock, store_lock

from .conftest import ROOT
from .servers import tail, wait_for

BUCKET = "doc-indexer-lock"
REGION = "us-east-1"
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
HOST, PID = socket.gethostname(), os.getpid()
logger = logging.getLogger("test-lock")


@pytest.fixture(scope="module")
def moto_options():
    """moto's S3 server on a free local port with one bucket; yields DOC_INDEXER_STORAGE_OPTIONS."""
    werkzeug = logging.getLogger("werkzeug")
    level = werkzeug.level
    werkzeug.setLevel(logging.WARNING)  # one log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name=REGION, **CREDENTIALS).create_bucket(
        Bucket=BUCKET
    )
    yield json.dumps({"endpoint": endpoint, "allow_http": True, "region": REGION, **CREDENTIALS})
    server.stop()
    werkzeug.setLevel(level)


@pytest.fixture
def uri(moto_options, monkeypatch, request):
    """An `s3://` dataset of this test's own, the store reachable from this process."""
    monkeypatch.setenv(STORAGE_OPTIONS_ENV, moto_options)
    return f"s3://{BUCKET}/{request.node.name.replace('[', '-').rstrip(']')}"


def lock_record(uri: str) -> dict:
    return json.loads(bytes(obstore.get(open_store(uri), LOCK_OBJECT).bytes()))


# -- the lock object --------------------------------------------------------------------------


def test_one_holder_at_a_time_and_a_timed_out_run_names_it(uri):
    with store_lock(uri, 5, logger, lease_s=30):
        record = lock_record(uri)
        assert Holder.from_dict(record["holder"]) == Holder.this_process().__class__(
            HOST, PID, record["holder"]["since"]
        )
        assert record["released"] is False
        started = time.monotonic()
        with pytest.raises(DatasetError) as error:
            with store_lock(uri, 0.5, logger, lease_s=30):
                pytest.fail("a second holder")
        assert time.monotonic() - started >= 0.5
        message = str(error.value)
        assert f"another ingest run is still writing {uri} after 0 s" in message
        assert f"pid {PID} on {HOST}, since " in message
    assert lock_record(uri)["released"] is True
    started = time.monotonic()
    with store_lock(uri, 5, logger, lease_s=30):  # a released lock is free at once
        assert time.monotonic() - started < 5
        assert lock_record(uri)["released"] is False


def test_a_waiter_says_when_the_lock_was_last_renewed(uri, caplog):
    with store_lock(uri, 5, logger, lease_s=30):
        written = datetime.fromisoformat(lock_record(uri)["written"])
        with pytest.raises(DatasetError, match="still writing"):
            with store_lock(uri, 0, logger, lease_s=30):
                pytest.fail("a second holder")
    waiting = next(r.getMessage() for r in caplog.records if "holds the lock of" in r.message)
    assert f"pid {PID} on {HOST}, since " in waiting
    assert f", last renewed {written:%Y-%m-%d %H:%M:%S} UTC (" in waiting


def test_a_lock_last_renewed_a_lease_ago_is_taken_at_the_first_look(uri, caplog):
    """The lease runs from the holder's last renewal, not from the waiter's first look: the
    lock of a run that stopped renewing a lease ago is taken over without waiting."""
    stalled = StoreLock(uri, 30, logger)
    stalled.acquire(0)
    stalled._stop.set()  # as a killed process: no renewal any more
    record = lock_record(uri)
    record["written"] = (datetime.now(UTC) - timedelta(seconds=31)).isoformat()
    obstore.put(open_store(uri), LOCK_OBJECT, json.dumps(record).encode())  # renewed 31 s ago
    with store_lock(uri, 0, logger, lease_s=30):  # no time to wait at all
        assert lock_record(uri)["token"] != record["token"]
    assert f"took over the lock of {uri} from pid {PID} on {HOST}" in caplog.text
    stalled.release()
    assert stalled.lost


@pytest.mark.slow
def test_of_two_waiters_one_takes_the_lock_at_a_time(uri, caplog):
    inside, overlaps, taken = [], [], []

    def run(name: str) -> None:
        with store_lock(uri, 30, logger, lease_s=30):
            inside.append(name)
            overlaps.append(len(inside))
            time.sleep(0.3)
            taken.append(name)
            inside.remove(name)

    with store_lock(uri, 5, logger, lease_s=30):
        waiters = [threading.Thread(target=run, args=(name,)) for name in ("a", "b")]
        for waiter in waiters:
            waiter.start()
        time.sleep(1)
        assert taken == []  # both wait while the first holds it
    for waiter in waiters:
        waiter.join(30)
    assert sorted(taken) == ["a", "b"] and overlaps == [1, 1]
    assert caplog.text.count("another ingest run holds the lock of") >= 2


@pytest.mark.slow
def test_a_holder_renews_its_lease_and_keeps_the_lock(uri):
    with store_lock(uri, 5, logger, lease_s=1.0):
        first = lock_record(uri)["writes"]
        with pytest.raises(DatasetError, match="still writing"):
            with store_lock(uri, 3, logger, lease_s=1.0):  # three leases long
                pytest.fail("took a lock whose holder renews it")
        assert lock_record(uri)["writes"] > first + 3


@pytest.mark.slow
def test_a_lock_not_renewed_for_its_lease_is_taken_over_and_its_holder_fails(uri, caplog):
    stalled = StoreLock(uri, 1.0, logger)
    stalled.acquire(0)
    stalled._stop.set()  # as a frozen process: no renewal any more
    started = time.monotonic()
    with store_lock(uri, 10, logger, lease_s=1.0):
        assert time.monotonic() - started >= 1.0
        stalled.release()  # its release finds the lock another run's
        assert stalled.lost
        assert lock_record(uri)["released"] is False  # the new holder's lock stays
    assert (
        "took over the lock of" in caplog.text and "not renewed for its lease of 1 s" in caplog.text
    )


@pytest.mark.slow
def test_a_lock_object_that_is_not_a_record_expires_after_a_lease(uri):
    obstore.put(open_store(uri), LOCK_OBJECT, b"")  # e.g. a local lock file copied over
    started = time.monotonic()
    with pytest.raises(DatasetError, match="held by a run that did not say who it is"):
        with store_lock(uri, 0.3, logger, lease_s=1.0):
            pass
    with store_lock(uri, 10, logger, lease_s=1.0):
        assert time.monotonic() - started >= 1.0


HOLD = """
import logging, sys, time
from tasks.dataset.store_lock import store_lock
with store_lock(sys.argv[1], 0, logging.getLogger("holder"), lease_s=float(sys.argv[2])):
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.mark.slow
def test_a_killed_holders_lease_expires(uri, moto_options, caplog):
    """A holder killed with SIGKILL (no release) keeps the lock one lease, then loses it."""
    env = {**os.environ, STORAGE_OPTIONS_ENV: moto_options}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, uri, "2"], cwd=ROOT, env=env, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        with pytest.raises(DatasetError, match=f"held by pid {holder.pid} on {HOST}, since "):
            with store_lock(uri, 0.5, logger, lease_s=30):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    killed = time.monotonic()
    with store_lock(uri, 20, logger, lease_s=30):  # the holder's lease (2 s) decides
        waited = time.monotonic() - killed
    assert 2.0 <= waited < 15, waited
    assert f"took over the lock of {uri} from pid {holder.pid} on {HOST}" in caplog.text


@pytest.mark.slow
def test_an_unreachable_store_is_a_clear_error(monkeypatch):
    options = {"endpoint": "http://127.0.0.1:9", "allow_http": True, "region": REGION}
    monkeypatch.setenv(STORAGE_OPTIONS_ENV, json.dumps({**options, **CREDENTIALS}))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(DatasetError, match="cannot take the lock of s3://"):
        with store_lock(f"s3://{BUCKET}/nowhere", 1, logger, lease_s=30):
            pass


def test_the_lease_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(LEASE_ENV, raising=False)
    assert lease_seconds() == 60.0
    monkeypatch.setenv(LEASE_ENV, "2.5")
    assert lease_seconds() == 2.5
    for wrong in ("0", "soon"):
        monkeypatch.setenv(LEASE_ENV, wrong)
        with pytest.raises(DatasetError, match=f"{LEASE_ENV} must be a number of seconds"):
            lease_seconds()


def test_a_local_dataset_keeps_its_file_lock_and_names_the_holder(tmp_path):
    uri = str(tmp_path / "index")
    with ingest_lock(uri, 5, logger):
        assert lock_file(uri).is_file()
        with pytest.raises(DatasetError, match=f"held by pid {PID} on {HOST}, since "):
            with ingest_lock(uri, 0.2, logger):
                pass
    with pytest.raises(ValueError, match="its lock is not a local file"):
        lock_file(f"s3://{BUCKET}/idx")


def test_without_a_shared_prefect_api_an_object_store_dataset_takes_the_lock_object(
    uri, monkeypatch
):
    monkeypatch.setattr("tasks.core.prefect_api.shared_api_url", lambda: None)
    with ingest_lock(uri, 5, logger):
        assert lock_record(uri)["holder"]["pid"] == PID


# -- the Prefect concurrency limit -------------------------------------------------------------


@pytest.mark.integration
def test_a_prefect_limit_takes_one_holder_and_a_timed_out_run_names_it(uri, prefect_backend):
    from prefect import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitUpdate

    from tasks.dataset.prefect_lock import holder_variable, limit_name, prefect_lock

    name = limit_name(uri)
    assert "/" not in name and name.startswith("doc-indexer:s3:doc-indexer-lock:")
    assert re.fullmatch(r"[a-z0-9_-]+", holder_variable(uri))
    with prefect_lock(uri, 5, logger, lease_s=60):
        for timeout in (0, 1):
            with pytest.raises(DatasetError, match=f"held by pid {PID} on {HOST}, since "):
                with prefect_lock(uri, timeout, logger, lease_s=60):
                    pytest.fail("a second holder")
    with prefect_lock(uri, 0, logger, lease_s=60):  # released: free at once
        pass
    with get_client(sync_client=True) as client:
        client.update_global_concurrency_limit(name, GlobalConcurrencyLimitUpdate(limit=2))
        with pytest.raises(DatasetError, match="must be active with one slot .*--limit 1"):
            with prefect_lock(uri, 5, logger, lease_s=60):
                pass
        client.delete_global_concurrency_limit_by_name(name)


@pytest.mark.integration
def test_a_run_with_a_prefect_api_waits_for_a_holder_without_one(uri, prefect_backend):
    """Machines with and without the Prefect API keep apart: the lock object is taken inside
    the concurrency limit."""
    from prefect import get_client

    from tasks.dataset.prefect_lock import limit_name

    def slots_taken() -> int:
        with get_client(sync_client=True) as client:
            return client.read_global_concurrency_limit_by_name(limit_name(uri)).active_slots

    with store_lock(uri, 5, logger, lease_s=60):  # a run on a machine without the API
        with pytest.raises(DatasetError, match=f"held by pid {PID} on {HOST}, since "):
            with ingest_lock(uri, 0.5, logger):
                pytest.fail("a second holder")
    assert slots_taken() == 0  # the limit's slot went back with the failed attempt
    said = logging.getLogger("test-lock.said")  # a handler of its own, whatever Prefect set up
    lines: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: lines.append(record.getMessage())
    said.addHandler(handler)
    said.setLevel(logging.INFO)
    with ingest_lock(uri, 5, said):
        assert lock_record(uri)["released"] is False and slots_taken() == 1
    assert lock_record(uri)["released"] is True and slots_taken() == 0
    assert [line for line in lines if "released the lock" in line] == [  # each lock once
        f"released the lock of {uri}: lock object {LOCK_OBJECT}",
        f"released the lock of {uri}: Prefect concurrency limit {limit_name(uri)}",
    ]


# -- two ingest runs at once ------------------------------------------------------------------

DOCUMENTS = {
    "alpha.md": "# Alpha\n\nThe quillwort grows in shallow lakes.\n",
    "beta.md": "# Beta\n\nA palimpsest is a page written over.\n",
    "gamma.md": "# Gamma\n\nThe lock keeps two writers apart.\n",
}
TIME = re.compile(r"^(\d\d):(\d\d):(\d\d)\.(\d{3}) \| \w+ +\| .*?(holding|released) the lock of")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("lock-corpus")
    for name, text in DOCUMENTS.items():
        (folder / name).write_text(text, "utf-8")
    return folder


@pytest.fixture(scope="module")
def single_run(corpus, prefect_backend, tmp_path_factory) -> tuple[list, list]:
    """The dataset one ingest run alone makes of the corpus (a local one, in this process)."""
    from flows.ingest import ingest

    uri = str(tmp_path_factory.mktemp("single-run") / "index")
    ingest(source_dir=str(corpus), index_uri=uri, model="hash")
    return contents(uri)


def contents(uri: str) -> tuple[list, list]:
    """The chunks and the ledger of a dataset, without the times of the run."""
    db = connect(uri)
    chunks = db.open_table(CHUNKS_TABLE).to_arrow().to_pylist()
    documents = db.open_table(DOCUMENTS_TABLE).to_arrow().to_pylist()
    chunk_keys = ("chunk_id", "doc_id", "text", "text_hash", "source_path")
    document_keys = ("doc_id", "content_hash", "status", "n_chunks")
    return (
        sorted(tuple(row[key] for key in chunk_keys) for row in chunks),
        sorted(tuple(row[key] for key in document_keys) for row in documents),
    )


def hold_times(log: str) -> list[tuple[float, str]]:
    """(seconds of the day, "holding" or "released") from a run's console log."""
    found = []
    for line in log.splitlines():
        match = TIME.match(line)
        if match:
            hours, minutes, seconds, millis, what = match.groups()
            found.append(
                (int(hours) * 3600 + int(minutes) * 60 + int(seconds) + int(millis) / 1000, what)
            )
    return found


def two_runs_at_once(corpus: Path, uri: str, env: dict, tmp_path: Path, lease_s: float) -> list:
    """Start two ingest commands on `uri` while this test holds the lock, let them go once
    both wait, and check they took turns; their logs."""
    logs = [tmp_path / f"run-{i}.log" for i in (1, 2)]
    args = [sys.executable, "-m", "flows.ingest", str(corpus), "--index", uri, "--model", "hash"]
    with ingest_lock(uri, 10, logger):
        runs = []
        for log in logs:
            with open(log, "wb") as handle:
                runs.append(
                    subprocess.Popen(
                        args, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT
                    )
                )
        waiting = f"holds the lock of {uri}: pid {PID} on {HOST}, since "  # this test
        try:
            wait_for(
                lambda: all(waiting in log.read_text(errors="replace") for log in logs),
                300,
                "both runs to wait for the lock this test holds",
            )
        except BaseException:
            for run in runs:
                run.kill()
            raise
    for run, log in zip(runs, logs, strict=True):
        assert run.wait(300) == 0, tail(log)
    texts = [log.read_text(errors="replace") for log in logs]
    spans = []  # each run's hold: from its first lock taken to its last released
    for text in texts:
        times = hold_times(text)
        assert {what for _, what in times} == {"holding", "released"}, text
        spans.append((min(t for t, w in times if w == "holding"), max(t for t, _ in times)))
    first, second = sorted(spans)
    assert first[1] <= second[0], texts  # one after the other
    counts = sorted(re.search(r"files: (\d+ seen, .*?);", text).group(1) for text in texts)  # type: ignore
    assert counts == [  # the second run read the ledger the first left
        "3 seen, 0 indexed, 3 unchanged, 0 empty, 0 failed, 0 removed, 0 waiting",
        "3 seen, 3 indexed, 0 unchanged, 0 empty, 0 failed, 0 removed, 0 waiting",
    ]
    return texts


@pytest.mark.integration
def test_two_ingest_runs_without_a_prefect_api_take_turns_on_the_lock_object(
    corpus, single_run, moto_options, uri, tmp_path, monkeypatch
):
    monkeypatch.setattr("tasks.core.prefect_api.shared_api_url", lambda: None)  # as the children
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env |= {STORAGE_OPTIONS_ENV: moto_options, "PREFECT_HOME": str(tmp_path / "prefect-home")}
    two_runs_at_once(corpus, uri, env, tmp_path, lease_s=60)
    assert contents(uri) == single_run
    assert lock_record(uri)["released"] is True


@pytest.mark.integration
def test_two_ingest_runs_with_a_prefect_api_take_turns_on_its_concurrency_limit(
    corpus, single_run, moto_options, uri, tmp_path, subprocess_env
):
    from prefect import get_client
    from prefect.variables import Variable

    from tasks.dataset.prefect_lock import holder_variable, limit_name

    env = {**subprocess_env, STORAGE_OPTIONS_ENV: moto_options}
    texts = two_runs_at_once(corpus, uri, env, tmp_path, lease_s=60)
    assert all(f"Prefect concurrency limit {limit_name(uri)}" in text for text in texts)
    assert contents(uri) == single_run
    with get_client(sync_client=True) as client:
        limit = client.read_global_concurrency_limit_by_name(limit_name(uri))
    assert (limit.limit, limit.active, limit.active_slots) == (1, True, 0)
    assert Variable.get(holder_variable(uri)) is None  # no holder recorded once released
    assert lock_record(uri)["released"] is True  # the lock object too, inside the limit
