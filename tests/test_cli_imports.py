"""The query command imports what the command needs: `--help` neither LanceDB nor Prefect nor a
model runtime, `--stats` and `--sources` no Prefect (README, "Everyday paths"). Each command
runs as a user runs it, with Python's import profiler naming every module it imported."""

from __future__ import annotations

import os

import pytest

from .commands import imported_modules, run_module, with_import_times
from .test_query import build_index, document

RUNTIMES = ("onnxruntime", "torch", "tensorflow")  # the models' (tasks/embed/)


def no_prefect_api(home: str) -> dict[str, str]:
    """This process's environment without any Prefect setting, Prefect's home at `home`."""
    kept = {name: value for name, value in os.environ.items() if not name.startswith("PREFECT_")}
    return {**kept, "PREFECT_HOME": home}


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory) -> str:
    uri = str(tmp_path_factory.mktemp("cli-imports") / "index")
    build_index(
        uri,
        [
            document("zebras.md", [("Intro", "common words about zebras")]),
            document("bread.md", [("Baking", "sourdough needs a starter")]),
        ],
    )
    return uri


def test_help_imports_no_lancedb_prefect_or_model_runtime(tmp_path):
    result = run_module(
        "flows.query", "--help", env=with_import_times(no_prefect_api(str(tmp_path)))
    )
    assert result.returncode == 0 and "--no-service" in result.stdout, result.stderr[-2000:]
    imported = imported_modules(result.stderr)
    assert {"argparse", "tasks.core.options"} <= imported, "the profiler's lines were not read"
    assert not imported & {"lancedb", "prefect", *RUNTIMES}, sorted(imported)


@pytest.mark.parametrize(
    ("what", "says"), [("--stats", "documents: 2 (2 indexed)"), ("--sources", "zebras.md")]
)
def test_stats_and_sources_import_no_prefect_and_no_model_runtime(
    small_dataset, what, says, tmp_path
):
    result = run_module(
        "flows.query",
        what,
        "--index",
        small_dataset,
        env=with_import_times(no_prefect_api(str(tmp_path))),
    )
    assert result.returncode == 0 and says in result.stdout, result.stderr[-2000:]
    imported = imported_modules(result.stderr)
    assert "lancedb" in imported, "the dataset was not read"
    assert not imported & {"prefect", *RUNTIMES}, sorted(imported & {"prefect", *RUNTIMES})
