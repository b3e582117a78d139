"""The everyday paths load only what they need: a run that finds nothing changed never imports
torch or sentence-transformers, a question needs no Prefect server, and a question to a
dataset of the default backend needs no torch."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest

from .commands import run_module
from .conftest import ROOT
from .offline import offline_env

pytestmark = pytest.mark.integration

HEAVY = ("torch", "sentence_transformers", "transformers", "unstructured")


def run_python(script: str, env: dict[str, str], cwd: Path = ROOT) -> str:
    return run_python_output(script, env, cwd).stdout


def run_python_output(
    script: str, env: dict[str, str], cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def loaded_after(call: str) -> str:
    """A script that runs `call` and prints which heavy modules it imported."""
    return f"import sys\n{call}\nprint('HEAVY', sorted(m for m in {HEAVY!r} if m in sys.modules))\n"


class Indexed(NamedTuple):
    corpus: Path
    index: str
    stdout: str  # the ingest command's


@pytest.fixture(scope="module")
def lighthouses(subprocess_env, tmp_path_factory) -> Indexed:
    """Two notes indexed by the ingest command in a fresh interpreter; tests only read them
    (a no-change run leaves the files and the chunks as they are)."""
    root = tmp_path_factory.mktemp("lighthouses")
    corpus = root / "docs"
    corpus.mkdir()
    (corpus / "a.md").write_text("# Lighthouses\n\nA lighthouse keeper trims the wick.\n", "utf-8")
    (corpus / "b.md").write_text("# Bread\n\nSourdough needs a starter.\n", "utf-8")
    index = str(root / "index")
    stdout = run_python(
        f"from flows.ingest import main; main([{str(corpus)!r}, '--index', {index!r}])",
        subprocess_env,
    )
    return Indexed(corpus, index, stdout)


def test_a_no_change_run_loads_no_model_and_no_parser(subprocess_env, lighthouses):
    corpus, index, first = lighthouses
    assert "files: 2 seen, 2 indexed" in first
    again = run_python(
        loaded_after(
            f"from flows.ingest import main; main([{str(corpus)!r}, '--index', {index!r}])"
        ),
        subprocess_env,
    )
    assert "files: 2 seen, 0 indexed, 2 unchanged" in again
    assert "HEAVY []" in again, again


def test_a_question_without_a_prefect_api_runs_in_process_from_any_folder(
    subprocess_env, lighthouses, tmp_path
):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    no_server = {k: v for k, v in subprocess_env.items() if k not in ("PREFECT_API_URL",)}
    question = "who trims the wick"
    out = run_python(
        loaded_after(
            f"from flows.query import main; main([{question!r}, '--index', {lighthouses.index!r}, "
            "'--mode', 'fts', '-k', '1'])\n"
            "print('PREFECT', 'prefect' in sys.modules)"
        ),
        no_server,
        cwd=elsewhere,
    )
    assert "a.md" in out and "PREFECT False" in out, out


def test_the_default_backend_prepares_itself_once_offline_and_answers_without_torch(
    subprocess_env, tmp_path
):
    """From a machine with no prepared model (an empty ONNX cache) and no network: the first
    ingest prepares the default backend, saying so in one line; a question in the default
    mode (hybrid: the question is embedded) imports neither torch nor sentence-transformers."""
    from tasks.embed.onnx_files import CACHE_ENV

    corpus = tmp_path / "docs"
    corpus.mkdir()
    fresh = uuid.uuid4().hex  # texts no earlier run embedded: Prefect's cache cannot answer
    (corpus / "a.md").write_text(f"# Lighthouses\n\nA keeper trims the wick. {fresh}\n", "utf-8")
    (corpus / "b.md").write_text(f"# Bread\n\nSourdough needs a starter. {fresh}\n", "utf-8")
    index = str(tmp_path / "index")
    env, attempts = offline_env(subprocess_env, tmp_path / "guard")
    env[CACHE_ENV] = str(tmp_path / "onnx-cache")
    ingest = run_python_output(
        f"from flows.ingest import main; main([{str(corpus)!r}, '--index', {index!r}])", env
    )
    assert "files: 2 seen, 2 indexed" in ingest.stdout
    line = "prepared the embedding model onnx-int8-token:all-MiniLM-L6-v2 for this machine in"
    assert ingest.stderr.count(line) == 1, ingest.stderr[-3000:]
    no_server = {k: v for k, v in env.items() if k != "PREFECT_API_URL"}
    out = run_python(
        loaded_after(
            f"from flows.query import main; main(['who trims the wick', '--index', {index!r}, "
            "'-k', '1'])"
        ),
        no_server,
    )
    assert "a.md" in out, out
    assert "'torch'" not in out and "'sentence_transformers'" not in out, out
    assert "HEAVY []" in out, out
    assert attempts.read_text("utf-8") == ""


def test_the_ingest_command_starts_its_temporary_server_first_and_stops_it(
    subprocess_env, tmp_path
):
    """Without an API server, `python -m flows.ingest` starts Prefect's server process itself
    before its imports (flows/temporary_server.py), runs the flow against it, and stops it."""
    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "a.md").write_text("# A\n\nSome words about lighthouses.\n", "utf-8")
    env = {k: v for k, v in subprocess_env.items() if k != "PREFECT_API_URL"}
    env["PREFECT_HOME"] = str(tmp_path / "prefect")
    result = run_module(
        "flows.ingest", str(corpus), "--index", str(tmp_path / "index"), "--model", "hash", env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "files: 1 seen, 1 indexed" in result.stdout
    started = re.search(
        r"Starting temporary Prefect server on (http://127\.0\.0\.1:\d+)", result.stderr
    )
    assert started, result.stderr[-3000:]
    assert f"Stopping temporary Prefect server on {started[1]}" in result.stderr
    assert "Starting temporary server" not in result.stderr, "Prefect started a second one"
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{started[1]}/api/health", timeout=2)
    assert (tmp_path / "prefect" / "prefect.db").exists(), "the server kept its state in the home"


def test_a_no_change_command_without_a_prefect_api_starts_no_flow_run(subprocess_env, tmp_path):
    """Without an API server, a run that would change nothing prints the same counts and
    exits 0 without importing Prefect or recording a flow run (its temporary server stops);
    a changed file is indexed by a flow run as before; with an API every run is a flow run."""
    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "a.md").write_text("# A\n\nSome words about lighthouses.\n", "utf-8")
    index = str(tmp_path / "index")
    env = {k: v for k, v in subprocess_env.items() if k != "PREFECT_API_URL"}
    env["PREFECT_HOME"] = str(tmp_path / "prefect")
    command = ("flows.ingest", str(corpus), "--index", index, "--model", "hash")
    first = run_module(*command, env=env)
    assert first.returncode == 0 and "files: 1 seen, 1 indexed" in first.stdout, first.stderr

    again = run_python_output(
        f"import sys\nfrom flows.ingest import main\nstatus = main({list(command[1:])!r})\n"
        "print('STATUS', status, 'PREFECT', 'prefect' in sys.modules)",
        env,
    )
    assert "files: 1 seen, 0 indexed, 1 unchanged, 0 empty, 0 failed, 0 removed" in again.stdout
    assert "STATUS 0 PREFECT False" in again.stdout, again.stdout
    assert "nothing changed: no flow run recorded (no Prefect API)" in again.stderr
    assert "Stopping temporary Prefect server" in again.stderr

    (corpus / "b.md").write_text("# B\n\nSourdough needs a starter.\n", "utf-8")
    changed = run_module(*command, env=env)
    assert changed.returncode == 0, changed.stderr[-3000:]
    assert "files: 2 seen, 1 indexed, 1 unchanged" in changed.stdout
    assert "Beginning flow run" in changed.stderr and "no flow run recorded" not in changed.stderr

    recorded = run_module(*command, env=subprocess_env)  # an API: a flow run, nothing changed
    assert "files: 2 seen, 0 indexed, 2 unchanged" in recorded.stdout
    assert "Beginning flow run" in recorded.stderr, recorded.stderr[-3000:]
