"""A question that finds the search service of its dataset running on this machine is answered
there (flows/service_client.py): the same hits and output as the question answered in its own
process, without loading LanceDB; a service file left by a service that is gone, `--no-service`
and what the service does not take send the question the cold way.

Each question runs as a user runs it, in a fresh interpreter with Python's import profiler on:
whether LanceDB was imported tells which way it went."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flows.service_client import Announcement, read_announcement, running_service
from tasks.dataset.location import service_file

from .commands import imported_modules, run_module, with_import_times
from .cross_encoder import build_tiny_cross_encoder
from .test_cli_imports import no_prefect_api
from .test_query import build_index, document
from .test_service import free_port
from .test_service import running_service as started_service

pytestmark = pytest.mark.integration

# The service's --max-k here (above the default k, 5): a question asking for more goes the
# cold way.
SERVICE_MAX_K = 6


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> str:
    uri = str(tmp_path_factory.mktemp("query-service") / "index")
    build_index(
        uri,
        [
            document("zebras.md", [("Savanna", "zebras graze on the savanna grass")], day=1),
            document("lions.md", [("Savanna", "lions hunt zebras at dawn")], day=2),
            document("bread.md", [("Baking", "sourdough bread needs a starter and time")], day=3),
            document("keeper.md", [("Coast", "the lighthouse keeper trims the wick")], day=4),
            document("notes.md", [("Misc", "notes about zebras, bread and lighthouses")], day=5),
        ],
    )
    return uri


@pytest.fixture(scope="module")
def service(dataset, tmp_path_factory):
    with started_service(
        dataset, tmp_path_factory.mktemp("service"), "--max-k", str(SERVICE_MAX_K)
    ) as running:
        yield running


@pytest.fixture
def own_dataset(dataset, tmp_path) -> str:
    """A copy of the dataset for a test that starts and stops services of its own."""
    copy = tmp_path / "own-index"
    shutil.copytree(dataset, copy, ignore=shutil.ignore_patterns(".service.json"))
    return str(copy)


def ask(tmp_path: Path, dataset: str, *options: str) -> tuple[str, bool]:
    """The output of `python -m flows.query --index DATASET OPTIONS` (no Prefect API), and
    whether it imported LanceDB (it searched itself)."""
    result = run_module(
        "flows.query",
        "--index",
        dataset,
        *options,
        env=with_import_times(no_prefect_api(str(tmp_path / "prefect"))),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    imported = imported_modules(result.stderr)
    assert "tasks.core.options" in imported, "the profiler's lines were not read"
    return result.stdout, "lancedb" in imported


def assert_same_hits(served: str, cold: str) -> None:
    served_hits, cold_hits = json.loads(served), json.loads(cold)
    assert cold_hits, "a question that finds nothing compares nothing"
    assert [h["chunk_id"] for h in served_hits] == [h["chunk_id"] for h in cold_hits]
    for mine, theirs in zip(served_hits, cold_hits, strict=True):
        assert mine["score"] == pytest.approx(theirs["score"], abs=1e-6)
        assert {k: v for k, v in mine.items() if k != "score"} == {
            k: v for k, v in theirs.items() if k != "score"
        }


@pytest.mark.parametrize(
    "options",
    [
        ("zebras on the savanna", "--json"),
        ("zebras", "--mode", "fts", "-k", "3", "--json"),
        ("bread", "--mode", "vector", "--section", "bak", "--since", "2024-01-02", "--json"),
        ("lighthouse keeper", "--context", "1", "--per-doc", "--json"),
        ("zebras on the savanna",),  # the table
        ("zebras", "--format", "markdown"),
    ],
)
def test_a_question_through_the_service_equals_the_cold_answer(service, dataset, options, tmp_path):
    served, searched_here = ask(tmp_path, dataset, *options)
    assert not searched_here, "the running service was not asked"
    cold, cold_searched_here = ask(tmp_path, dataset, *options, "--no-service")
    assert cold_searched_here, "--no-service still asked the service"
    if "--json" in options:
        assert_same_hits(served, cold)
    else:
        assert served == cold and "zebras" in served


def test_what_the_service_does_not_take_goes_the_cold_way(service, dataset, tmp_path):
    too_many = str(SERVICE_MAX_K + 1)  # the service answers 422
    out, searched_here = ask(tmp_path, dataset, "zebras", "-k", too_many, "--json")
    assert searched_here and len(json.loads(out)) == 5
    _, searched_here = ask(tmp_path, dataset, "zebras", "--model", "hash:16", "--json")
    assert searched_here, "--model is checked against the dataset here"


def test_a_reranking_service_answers_as_the_command_would(own_dataset, tmp_path):
    """A service started with --rerank re-ranks a question only when it names that
    cross-encoder; one naming another goes the cold way."""
    ours = str(build_tiny_cross_encoder(tmp_path / "tiny-ce"))
    other = str(build_tiny_cross_encoder(tmp_path / "other-ce", seed=1))
    with started_service(own_dataset, tmp_path, "--rerank", ours):
        for rerank in ((), ("--rerank", ours)):
            options = ("zebras on the savanna", "--json", *rerank)
            served, searched_here = ask(tmp_path, own_dataset, *options)
            assert not searched_here, f"the service was not asked with {rerank}"
            cold, _ = ask(tmp_path, own_dataset, *options, "--no-service")
            assert_same_hits(served, cold)
        _, searched_here = ask(tmp_path, own_dataset, "zebras", "--rerank", other)
        assert searched_here, "another cross-encoder than the service's is loaded here"


def test_the_service_names_itself_while_it_runs_and_not_after(own_dataset, tmp_path):
    path = service_file(own_dataset)
    with started_service(own_dataset, tmp_path) as running:
        announced = read_announcement(path)
        assert announced is not None and announced.index == own_dataset
        assert f"http://{announced.host}:{announced.port}" == running.base
        assert running_service(own_dataset) == announced
        # a copy of the dataset, its service file with it, is not what the service serves
        copy = shutil.copytree(own_dataset, tmp_path / "copy")
        assert (copy / path.name).exists() and running_service(str(copy)) is None
    assert not path.exists(), "a service stopped by SIGTERM left its file behind"


def test_a_service_file_whose_process_is_gone_is_ignored(own_dataset, tmp_path):
    """A killed service leaves its file: the next question answers itself, as it would have
    without one; a file naming a process that still runs is taken."""
    port = free_port()
    dataset = own_dataset
    command = [sys.executable, "-m", "flows.query", "--serve", "--index", dataset]
    process = subprocess.Popen(
        [*command, "--port", str(port)],
        env=no_prefect_api(str(tmp_path / "prefect")),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    path = service_file(dataset)
    try:
        deadline = time.monotonic() + 120
        while (found := read_announcement(path)) is None or found.pid != process.pid:
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    left = read_announcement(path)
    try:
        assert left is not None and left.pid == process.pid, "SIGKILL left no file to test"
        assert running_service(dataset) is None
        out, searched_here = ask(tmp_path, dataset, "zebras", "--json")
        assert searched_here and json.loads(out), "no answer without the service"
        # the same file naming a process that runs (this one) is taken
        alive = Announcement(**{**left.__dict__, "pid": os.getpid()})
        path.write_text(json.dumps(alive.__dict__), "utf-8")
        assert running_service(dataset) == alive
        # ... and a file that is not an announcement is ignored
        for malformed in [json.dumps({**alive.__dict__, "pid": str(os.getpid())}), "{"]:
            path.write_text(malformed, "utf-8")
            assert running_service(dataset) is None, malformed
    finally:
        path.unlink(missing_ok=True)
