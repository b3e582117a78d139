"""Shared fixtures: a throw-away Prefect backend, sample files and the shared corpus."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "sample"
SHARED = ROOT.parent / "shared"


def shared_path(*parts: str) -> Path:
    """A path under ../shared, or skip the test with a clear message when it is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared test material not found at {path} (../shared is not present)")
    return path


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """An environment with no Prefect settings and a home folder of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["HOME"] = str(tmp_path / "user-home")
    monkeypatch.setattr(os, "environ", env)
    return env


@pytest.fixture(scope="session")
def prefect_backend(tmp_path_factory):
    """Real Prefect engine against a temporary server, database and result storage."""
    from prefect.settings import PREFECT_LOCAL_STORAGE_PATH, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    storage = tmp_path_factory.mktemp("prefect-results")
    with temporary_settings({PREFECT_LOCAL_STORAGE_PATH: storage}):
        with prefect_test_harness(server_startup_timeout=120):
            yield storage


@pytest.fixture(scope="session")
def subprocess_env(prefect_backend, tmp_path_factory) -> dict[str, str]:
    """Environment for flow runs in child processes: the test server, a throw-away home, and
    one parser process per run (tests run many small runs, some side by side; the pool of
    parser processes is tested in this process)."""
    from prefect.settings import PREFECT_API_URL

    from tasks.parse.worker import WORKERS_ENV

    home = tmp_path_factory.mktemp("prefect-home")
    return {
        **os.environ,
        "PREFECT_API_URL": PREFECT_API_URL.value(),
        "PREFECT_HOME": str(home),
        WORKERS_ENV: "1",
    }


def build_small_corpus(corpus: Path) -> Path:
    """A few real sample documents: Markdown, English and Chinese HTML, a short PDF."""
    from pypdf import PdfReader, PdfWriter

    for relative in SMALL_CORPUS_FILES:
        target = corpus / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SAMPLE / relative, target)
    # Five pages of a real manual keep the PDF path real but the test short.
    writer = PdfWriter()
    for page in PdfReader(SAMPLE / "r-manuals" / "R-FAQ.pdf").pages[4:9]:
        writer.add_page(page)
    (corpus / "r-manuals").mkdir()
    with open(corpus / "r-manuals" / "R-FAQ-excerpt.pdf", "wb") as handle:
        writer.write(handle)
    return corpus


SMALL_CORPUS_FILES = (
    "rust-book/ch04-01-what-is-ownership.md",
    "rust-book/ch08-03-hash-maps.md",
    "python-docs/venv.html",
    "debian-handbook-zh-cn/sect.apt-file.html",
)


@pytest.fixture
def small_corpus(tmp_path) -> Path:
    return build_small_corpus(tmp_path / "corpus")


class SmallIndex(NamedTuple):
    corpus: Path
    uri: str
    summary: Any  # the ingest flow's summary of the run that built it


@pytest.fixture(scope="session")
def small_index(prefect_backend, tmp_path_factory) -> SmallIndex:
    """The small corpus ingested once, locally, with the default model. Tests only read it;
    a test that changes the corpus or the dataset takes `small_index_copy`."""
    from flows.ingest import ingest

    root = tmp_path_factory.mktemp("small-index")
    corpus = build_small_corpus(root / "corpus")
    uri = str(root / "index")
    return SmallIndex(corpus, uri, ingest(source_dir=str(corpus), index_uri=uri))


@pytest.fixture
def small_index_copy(small_index, tmp_path) -> SmallIndex:
    """A private copy of the shared small corpus and its dataset (file times kept)."""
    corpus = shutil.copytree(small_index.corpus, tmp_path / "corpus")
    index = shutil.copytree(small_index.uri, tmp_path / "index")
    return SmallIndex(corpus, str(index), small_index.summary)
