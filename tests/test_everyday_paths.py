"""The everyday paths load only what they need: a run that finds nothing changed never imports
torch or sentence-transformers, and a question needs no Prefect server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT

pytestmark = pytest.mark.integration

HEAVY = ("torch", "sentence_transformers", "transformers", "unstructured")


def run_python(script: str, env: dict[str, str], cwd: Path = ROOT) -> str:
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def loaded_after(call: str) -> str:
    """A script that runs `call` and prints which heavy modules it imported."""
    return f"import sys\n{call}\nprint('HEAVY', sorted(m for m in {HEAVY!r} if m in sys.modules))\n"


def test_a_no_change_run_loads_no_model_and_no_parser(subprocess_env, tmp_path):
    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "a.md").write_text("# A\n\nSome words about lighthouses.\n", "utf-8")
    index = str(tmp_path / "index")
    first = run_python(
        loaded_after(
            f"from flows.ingest import main; main([{str(corpus)!r}, '--index', {index!r}])"
        ),
        subprocess_env,
    )
    assert "files: 1 seen, 1 indexed" in first
    again = run_python(
        loaded_after(
            f"from flows.ingest import main; main([{str(corpus)!r}, '--index', {index!r}])"
        ),
        subprocess_env,
    )
    assert "files: 1 seen, 0 indexed, 1 unchanged" in again
    assert "HEAVY []" in again, again


def test_a_question_without_a_prefect_api_runs_in_process_from_any_folder(subprocess_env, tmp_path):
    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "a.md").write_text("# Lighthouses\n\nA lighthouse keeper trims the wick.\n", "utf-8")
    (corpus / "b.md").write_text("# Bread\n\nSourdough needs a starter.\n", "utf-8")
    index = str(tmp_path / "index")
    run_python(
        f"from flows.ingest import main; main([{str(corpus)!r}, '--index', {index!r}])",
        subprocess_env,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    no_server = {k: v for k, v in subprocess_env.items() if k not in ("PREFECT_API_URL",)}
    question = "who trims the wick"
    out = run_python(
        loaded_after(
            f"from flows.query import main; main([{question!r}, '--index', {index!r}, "
            "'--mode', 'fts', '-k', '1'])\n"
            "print('PREFECT', 'prefect' in sys.modules)"
        ),
        no_server,
        cwd=elsewhere,
    )
    assert "a.md" in out and "PREFECT False" in out, out
