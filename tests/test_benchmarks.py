"""Every script in benchmarks/ keeps running: its smoke mode completes and prints its table.

Each runs as `python -m benchmarks.NAME --smoke` in a child process, with the network blocked
(tests/offline.py), a fresh Prefect home and its temporary folders under tmp_path; those that
run flows use the session's Prefect test server (ingest and startup where their smoke mode
allows: their no-server runs still start a temporary one). The checks read the table's header
and row labels and the counts a run must give, never a figure of time or speed: measuring is
the scripts' job (benchmarks/RESULTS.md). The runs start together, PARALLEL at a time, when
the first of these tests needs one. benchmarks/analysers.py's smoke mode is run by
tests/test_analysis.py, which also checks the analysers it chooses.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tasks.embed.models import BUNDLED_MODEL, DEFAULT_MODEL
from tasks.search.params import MODES

from .commands import run_module
from .conftest import ROOT, SHARED, shared_path
from .offline import offline_env

PARALLEL = 2  # smoke runs at once: most are one busy thread at a time


def run_smoke(name: str, tmp_path: Path, env: dict[str, str] | None, extra: tuple[str, ...]) -> str:
    """stdout of `python -m benchmarks.NAME --smoke`, which must exit 0 without going online;
    `env` None: this environment without a Prefect API (nothing it runs needs one)."""
    base = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} if env is None else env
    (tmp_path / "tmp").mkdir()
    guarded, attempts = offline_env(
        {**base, "PREFECT_HOME": str(tmp_path / "prefect-home"), "TMPDIR": str(tmp_path / "tmp")},
        tmp_path / "guard",
    )
    result = run_module(f"benchmarks.{name}", "--smoke", *extra, env=guarded)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert attempts.read_text("utf-8") == ""
    assert "skipped" not in result.stdout, result.stdout
    return result.stdout


def json_line(stdout: str) -> dict:
    """The one JSON line a benchmark prints after its table."""
    return json.loads(next(line for line in reversed(stdout.splitlines()) if line[:1] == "{"))


def assert_lines(stdout: str, *patterns: str) -> None:
    """Each pattern matches a whole line of the output."""
    lines = stdout.splitlines()
    for pattern in patterns:
        assert any(re.fullmatch(pattern, line) for line in lines), f"{pattern!r} in\n{stdout}"


def check_query(out: str) -> None:
    """English and Chinese rows written by the ingest's write and upkeep steps: every mode
    answers, in process and over HTTP (full text needs the analysed column and its index)."""
    times = r"p50 +[\d.]+ ms  p95 +[\d.]+ ms"
    assert_lines(
        out,
        r"loaded, split and embedded \d+ passages and 4 questions in .*",
        rf"sweep +200 rows: exact {times} \| IVF_SQ {times} recall@10 [\d.]+ \(built in .*\)",
        rf"sweep +400 rows: exact {times} \| IVF_SQ {times} recall@10 [\d.]+ \(built in .*\)",
        r"400 chunks \(written and finalized in [\d.]+ s; vector index: no; vectors kept in "
        r"memory: yes, read in [\d.]+ s\)",
        *(rf"  in-process {mode:<6} {times}" for mode in MODES),
        *(
            rf"  in-process, LanceDB vector lists {mode:<6} {times}"
            for mode in ("vector", "hybrid")
        ),
        *(rf"  http       {mode:<6} {times}" for mode in MODES),
        rf"  vector search alone: LanceDB as queried {times} \| LanceDB exact {times}",
        rf"  vector search alone: kept in memory {times}",
        r"  recall@10 against exact search: 1\.000",  # no index at 400 rows: exact both ways
    )
    report = json_line(out)["sizes"]["400"]
    assert set(report["in_process"]) == set(report["http"]) == set(MODES)
    assert report["vector_index"] is False


def check_mcp_latency(out: str) -> None:
    """Every mode answers POST /search, the tool call sent by hand and both SDK sessions'
    calls (the script fails unless their hits are the same)."""
    cell = r" *-?[\d.]+ / +-?[\d.]+"
    assert_lines(
        out,
        r"400 chunks \(written and finalized in [\d.]+ s\), 4 questions a mode, k=10; .*",
        *(rf"{mode:<12}  " + r" \| ".join([cell] * 7) for mode in MODES),
    )
    report = json_line(out)
    assert (report["rows"], report["questions"]) == (400, 4)
    assert set(report["session_open_ms"]) == {"mcp", "mcp_legacy"}
    for mode in MODES:
        assert {"post", "mcp_by_hand", "mcp", "mcp_legacy", "mcp_minus_post"} <= set(report[mode])


def check_embedders(out: str) -> None:
    """The default's parts are timed; every backend, and the per-token one with 2 worker
    threads, encodes the chunks."""
    token = f"onnx-int8-token:{BUNDLED_MODEL} workers=2"
    specs = [DEFAULT_MODEL, BUNDLED_MODEL, f"onnx:{BUNDLED_MODEL}", f"onnx-int8:{BUNDLED_MODEL}"]
    assert_lines(
        out,
        r"16 chunks of .*data/sample/rust-book",
        r"multilingual: SentencePiece pieces +[\d.]+ CPU s +[\d.]+%",
        r"English: onnxruntime passes +[\d.]+ CPU s +[\d.]+%",
        *(
            rf"{re.escape(label)} +[\d.]+ chunks/s +[\d.]+ CPU ms/chunk"
            for label in [*specs, token]
        ),
    )
    assert set(json_line(out)) == {*specs, token}


def check_object_sources(out: str) -> None:
    """A folder and a bucket of the same notes: each first run indexes all of them (each object
    read once), each no-change run none (no object read)."""
    assert_lines(
        out,
        r"folder first +[\d.]+ +1\.00 .* 20 +20 +0 +0",
        r"folder no change +[\d.]+ +1\.00 .* 20 +0 +20 +0",
        r"bucket first +[\d.]+ +[\d.]+ .* 20 +20 +0 +20",
        r"bucket no change +[\d.]+ +[\d.]+ .* 20 +0 +20 +0",
    )


def check_incremental(out: str) -> None:
    """A full run, a no-change run, an edit and a deletion, each doing what it must."""
    assert_lines(
        out,
        r"4 files, \d+ chunks in the final index",
        r"run +seconds +ratio +indexed unchanged removed embedded reused",
        r"full +[\d.]+ +1\.000 +4 +0 +0 +\d+ +0",
        r"no change +[\d.]+ +[\d.]+ +0 +4 +0 +0 +0",
        r"50% edited \(2 files\) +[\d.]+ +[\d.]+ +2 +2 +0 +\d+ +\d+",
        r"50% deleted \(2 files\) +[\d.]+ +[\d.]+ +0 +2 +2 +0 +0",
    )
    runs = json_line(out)["runs"]
    assert [run["failed"] for run in runs] == [0, 0, 0, 0]
    assert runs[2]["chunks_reused"] > 0  # the edited files' unchanged chunks kept their vectors


def check_ingest(out: str) -> None:
    """The whole command, the yardstick encode and a no-change re-run that writes nothing."""
    keys = (
        "source_dir", "model", "chunks", "whole_process_wall_s", "torch_encode_s", "ratio",
        "first_forward_pass_s", "peak_rss_ingest_process_mib", "peak_rss_process_tree_mib",
        "no_change_rerun_wall_s", "no_change_rerun_written",
    )  # fmt: skip
    assert_lines(out, *(rf"{key} +\S.*" for key in keys))
    result = json_line(out)
    assert list(result) == list(keys)
    assert result["chunks"] > 0 and result["no_change_rerun_written"] == 0


def check_quality(out: str) -> None:
    """English and Chinese sets scored in every mode, each finding some judged documents."""
    cell = r" +[\d.]+ \([\d.]+, [\d.]+; [\d.]+\)"
    assert_lines(
        out,
        r"nDCG@10 .*",
        r"set +" + " +".join(MODES),
        rf"xquad-en{cell * len(MODES)}",
        rf"xquad-zh{cell * len(MODES)}",
    )
    # --tune: each list alone, the best settings, the current one
    assert_lines(
        out,
        r"each list alone \(vector, text, translated\): .*",
        r"(never below a list|best \(none is never below a list\)): α, α\(CJK\), gate, γ, "
        r"α\(across\) = .*",
        r"now \(.*",
    )
    report = json.loads(next(line for line in out.splitlines() if line.startswith('{"xquad')))
    assert set(report) == {"xquad-en", "xquad-zh"}
    for name, modes in report.items():
        assert set(modes) == set(MODES)
        assert all(0 < figures["ndcg@10"] <= 1 for figures in modes.values()), (name, modes)


def check_designs(out: str) -> None:
    """Every design scored on both cut sets in the three modes, each finding some documents."""
    cell = r"{} (0\.\d{{3}}|1\.000) \([\d.]+, [\d.]+\)"
    row = "  ".join(cell.format(mode) for mode in ("vector", "fts", "hybrid"))
    lines = [line for line in out.splitlines() if line.startswith("xquad-")]
    for name in ("xquad-en", "xquad-zh"):
        measured = {line.split()[1] for line in lines if line.split()[0] == name}
        assert {"dual", "e5", "dual-e5", "headings-path", "runs-0.3"} <= measured, out
    for line in lines:
        assert re.fullmatch(rf"xquad-(en|zh) +\S+ *{row}", line), line
        assert float(line.split("hybrid ")[1].split()[0]) > 0, line


def check_rerank(out: str) -> None:
    """The cross-encoder re-scores on one thread and on the default threads."""
    row = r"threads {} +depth +5: wall p50 +[\d.]+ ms  p95 +[\d.]+ ms  cpu p50 +[\d.]+ ms"
    assert_lines(
        out, r"\d+ candidate chunks, 3 questions; torch .*", row.format(1), row.format(r"\d+")
    )


def check_startup(out: str) -> None:
    """A plain command, one without and with a Prefect server, one from another folder, one
    with a search service running, each beside the floor it is read against."""
    rows = {
        "query --stats": "import tasks, lancedb",
        "query, --mode fts, no server": "import tasks, lancedb",
        "query, default mode, no server, another folder": "import tasks, lancedb",
        "query, --mode fts, server running": "import tasks, prefect, lancedb",
        "query, default mode, service running": "python -c pass",
    }
    floors = ["python -c pass", "import tasks, lancedb", "import tasks, prefect, lancedb"]
    load = r"[\d.]+ [\d.]+ [\d.]+"
    assert_lines(
        out,
        rf"median wall seconds over 1 runs; corpus .*; load average {load} at the start, "
        rf"{load} at the end",
        *(rf"floor: {re.escape(floor)} +[\d.]+" for floor in floors),
        *(
            rf"{re.escape(name)} +[\d.]+  {re.escape(floor)} +[\d.]+  [+-][\d.]+"
            for name, floor in rows.items()
        ),
    )
    report = json_line(out)
    assert list(report["floors"]) == floors
    assert {name: row["floor"] for name, row in report["commands"].items()} == rows


def check_served_run(out: str) -> None:
    """A no-change run of the served ingest deployment, completed, timed from its own record."""
    assert_lines(
        out,
        r"no-change ingest runs of deployment ingest/bench served by deployments.serve; .*",
        r" +run +state +process s +flow s +picked up after s",
        r" +1 +COMPLETED( +[\d.]+){3}",
        r"median( +[\d.]+){3}",
    )
    report = json_line(out)
    assert [run["state"] for run in report["runs"]] == ["COMPLETED"]
    assert report["medians"]["process s"] >= report["medians"]["flow s"] > 0


def check_kills(out: str) -> None:
    """Killed at the smoke's point, resumed: the clean run's table and ledger, a clean audit."""
    assert_lines(
        out,
        r"clean run: [\d.]+ s, .*",
        r"kill point +died +resume rc +audit +equal",
        r"delete:1 +True +0 +0 +True",
        r"compact:1 +True +0 +0 +True",
        r"2 of 2 kill points ended as the clean run",
    )


def check_lock(out: str) -> None:
    """Each kind of dataset lock taken and released (benchmarks/lock.py)."""
    assert_lines(
        out,
        r"lock +rounds +median ms +p90 ms +first ms",
        r"file lock \(local dataset\) +3 +[\d.]+ +[\d.]+ +[\d.]+",
        r"lock object \(moto S3\) +3 +[\d.]+ +[\d.]+ +[\d.]+",
        r"Prefect concurrency limit +3 +[\d.]+ +[\d.]+ +[\d.]+",
    )


def check_watch(out: str) -> None:
    """The edit found by a query, a burst applied whole, the idle watcher measured."""
    assert_lines(
        out,
        r"data/sample/rust-book: 12 files, model hash:64",
        r"reconcile at start: [\d.]+ s to the first run's end \(watch: run 1 \(reconcile\).*",
        r"edit to search +median [\d.]+ s  p90 [\d.]+ s  max [\d.]+ s  over 1 edits",
        r"burst +20 files: \d+ runs, all applied: True, .*",
        r"idle CPU +watcher [\d.]+ %  process tree [\d.]+ %  over 1 s",
    )
    report = json_line(out)
    assert len(report["edit_s"]) == 1
    assert report["burst"]["all_applied"] is True and report["burst"]["runs"] >= 1
    assert all("changed paths" in line for line in report["burst"]["run_lines"])


def check_scale(out: str) -> None:
    """Generated notes through the whole command: every note indexed, a commit, a no-change
    re-run and a cold query, each row printed."""
    keys = (
        "files", "indexed", "chunks", "wall_s", "files_per_s", "chunks_per_s", "flow_s",
        "stage_s", "commits", "first_embedding_s", "peak_rss_ingest_mib",
        "rss_ingest_first_tenth_mib", "peak_rss_tree_mib", "no_change_rerun_s",
        "no_change_rerun_peak_rss_mib", "cold_query_s",
    )  # fmt: skip
    assert_lines(out, r"40 notes, [\d.]+ MiB, generated in .*", *(rf"{key} +\S.*" for key in keys))
    [run] = json_line(out)["runs"]
    assert run["model"] == "hash:384" and run["files"] == run["indexed"] == 40
    assert run["chunks"] >= 40 and run["commits"] >= 1
    assert {"load (waiting)", "split", "embed", "write"} <= set(run["stage_s"])


def check_finalize_memory(out: str) -> None:
    """Each of the finalize's steps in a process of its own, the whole finalize, a later
    run's, and the vector index's recall on the default model's vectors."""
    figures = r" +[\d.]+" * 4
    steps = ("fts", "vector", "optimize", "cleanup", "finalize")
    assert_lines(
        out,
        r"built 2000 rows in [\d.]+ s: .*",
        r"step +settings +before MiB +peak MiB +added +s",
        *(rf"{step} +-{figures}" for step in steps),
        rf'later +\{{"notes added": 10\}}{figures}',
        r"recall@10 against exact search: \d+ real vectors, \d+ rows, 3 questions",
        r"  - +recall@10 [\d.]+  query p50 [\d.]+ ms  built in [\d.]+ s",
    )
    report = json_line(out)
    assert [step["step"] for step in report["steps"]] == [*steps, "later"]
    assert all(step["peak_mib"] >= step["before_mib"] > 0 for step in report["steps"])
    assert len(report["recall"]) == 1


@dataclass(frozen=True)
class Smoke:
    """How a benchmark's smoke run starts and what its output must show."""

    check: Callable[[str], None]
    extra: tuple[str, ...] = ()  # arguments after --smoke
    test_server: bool = False  # runs flows: against the session's Prefect test server
    shared: tuple[str, ...] = ()  # what it needs under ../shared; skipped without it


# Longest first (each run alone), so that PARALLEL runs at a time end close together.
SMOKE = {
    "kills": Smoke(check_kills, test_server=True),
    "ingest": Smoke(check_ingest, test_server=True),
    "finalize_memory": Smoke(check_finalize_memory, ("--recall",)),
    "embedders": Smoke(check_embedders, ("--parts",)),
    "startup": Smoke(check_startup, test_server=True),
    "served_run": Smoke(check_served_run, test_server=True),
    "watch": Smoke(check_watch, test_server=True),
    "scale": Smoke(check_scale, test_server=True),
    "incremental": Smoke(check_incremental, test_server=True),
    "object_sources": Smoke(check_object_sources, test_server=True),
    "lock": Smoke(check_lock, test_server=True),
    "quality": Smoke(
        check_quality, ("--tune",), test_server=True, shared=("eval/xquad-en", "eval/xquad-zh")
    ),
    "designs": Smoke(check_designs, test_server=True, shared=("eval/xquad-en", "eval/xquad-zh")),
    "query": Smoke(check_query, ("--sweep",)),
    "mcp_latency": Smoke(check_mcp_latency),
    "rerank": Smoke(check_rerank),
}
SMOKE_TESTED_ELSEWHERE = {"analysers": "tests/test_analysis.py"}


def test_every_benchmark_has_a_smoke_mode_that_a_test_runs():
    scripts = {path.stem for path in (ROOT / "benchmarks").glob("*.py")}
    assert scripts == {*SMOKE, *SMOKE_TESTED_ELSEWHERE}
    for name in scripts:  # each says so in its usage line
        assert "[--smoke]" in (ROOT / "benchmarks" / f"{name}.py").read_text("utf-8"), name
    for name, test_file in SMOKE_TESTED_ELSEWHERE.items():
        assert f'"benchmarks.{name}", "--smoke"' in (ROOT / test_file).read_text("utf-8")


@pytest.fixture(scope="module")
def smoke_runs(request, tmp_path_factory) -> Iterator[dict[str, Future[str]]]:
    """The smoke runs of the scripts whose tests were collected (those with what they need
    under ../shared), all submitted at once and run PARALLEL at a time."""
    wanted = {
        item.callspec.params["script"]
        for item in request.session.items
        if getattr(item, "module", None) is request.module and hasattr(item, "callspec")
    }
    runnable = [
        name
        for name in SMOKE
        if name in wanted and all((SHARED / part).exists() for part in SMOKE[name].shared)
    ]
    on_server = any(SMOKE[name].test_server for name in runnable)
    server_env = request.getfixturevalue("subprocess_env") if on_server else None
    pool = ThreadPoolExecutor(PARALLEL)
    try:
        yield {
            name: pool.submit(
                run_smoke,
                name,
                tmp_path_factory.mktemp(f"smoke-{name}"),
                server_env if SMOKE[name].test_server else None,
                SMOKE[name].extra,
            )
            for name in runnable
        }
    finally:
        pool.shutdown(cancel_futures=True)


@pytest.mark.integration
@pytest.mark.model
@pytest.mark.parametrize("script", SMOKE)
def test_the_benchmark_runs_in_its_smoke_mode_and_prints_its_table(script, smoke_runs):
    for part in SMOKE[script].shared:
        shared_path(*part.split("/"))
    SMOKE[script].check(smoke_runs[script].result())
