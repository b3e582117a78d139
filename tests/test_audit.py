"""The audit finds each way an index can drift from its folder, and --repair makes it clean
with the chunks a clean ingest gives: a real dataset (default model, real flow) corrupted
behind the product's back in each of those ways."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tasks.dataset.dataset import Dataset
from tasks.dataset.schema import SEARCH_TEXT_COLUMN, VECTOR_COLUMN
from tasks.ingest.audit import Check, RepairPlan, audit

from .commands import own_prefect_home, run_module

pytestmark = pytest.mark.integration

FILES = {
    "guide/borrowing.md": "# Borrowing\n\nA reference borrows a value without taking "
    "ownership of it.\n\n## Rules\n\nAt any time you can have one mutable reference or any "
    "number of immutable ones.\n",
    "guide/errors.md": "# Errors\n\nRecoverable errors use Result; unrecoverable ones panic.\n",
    "guide/cargo.md": "# Cargo\n\nCargo builds your code, downloads dependencies and runs tests.\n",
    "notes/tea.md": "# 绿茶\n\n绿茶的冲泡水温一般在八十度左右，浸泡两三分钟即可。\n",
    "notes/trains.md": "# Trains\n\nHigh-speed trains run at more than 300 km/h.\n",
}
COMPARED = ["chunk_id", "doc_id", "chunk_index", "chunk_count", "text", "text_hash"]


@pytest.fixture(scope="module")
def built(prefect_backend, tmp_path_factory) -> tuple[Path, Path]:
    """A folder and its index, made by the ingest flow; tests corrupt copies of both."""
    from flows.ingest import ingest

    root = tmp_path_factory.mktemp("audit")
    source = root / "docs"
    for relative, text in FILES.items():
        (source / relative).parent.mkdir(parents=True, exist_ok=True)
        (source / relative).write_text(text, "utf-8")
    summary = ingest(source_dir=str(source), index_uri=str(root / "index"))
    assert summary.indexed == len(FILES)
    return source, root / "index"


@pytest.fixture
def copy(built, tmp_path) -> tuple[Path, Dataset]:
    source, index = built
    shutil.copytree(source, tmp_path / "docs", copy_function=shutil.copy2)  # mtimes kept
    shutil.copytree(index, tmp_path / "index")
    return tmp_path / "docs", Dataset(str(tmp_path / "index"))


def _rows_of(dataset: Dataset, doc_id: str) -> list[dict]:
    return dataset.chunks.search().where(f"doc_id = '{doc_id}'").limit(None).to_arrow().to_pylist()


def delete_rows(source: Path, dataset: Dataset) -> None:
    dataset.chunks.delete("doc_id = 'guide/errors.md'")


def duplicate_rows(source: Path, dataset: Dataset) -> None:
    dataset.chunks.add(_rows_of(dataset, "guide/borrowing.md"))


def edit_file(source: Path, dataset: Dataset) -> None:
    (source / "guide/cargo.md").write_text("# Cargo\n\nCargo publishes crates too.\n", "utf-8")


def add_and_remove_files(source: Path, dataset: Dataset) -> None:
    (source / "notes/new.md").write_text("# New\n\nA file no run has seen.\n", "utf-8")
    (source / "notes/trains.md").unlink()


def zero_a_vector(source: Path, dataset: Dataset) -> None:
    dimension = dataset.fingerprint.dimension
    dataset.chunks.update(
        where="doc_id = 'notes/tea.md'", values={VECTOR_COLUMN: [0.0] * dimension}
    )


def drop_the_full_text_index(source: Path, dataset: Dataset) -> None:
    index = next(i for i in dataset.chunks.list_indices() if SEARCH_TEXT_COLUMN in i.columns)
    dataset.chunks.drop_index(index.name)


def forget_a_ledger_row(source: Path, dataset: Dataset) -> None:
    dataset.documents.delete("doc_id = 'notes/trains.md'")


def renumber_a_chunk(source: Path, dataset: Dataset) -> None:
    dataset.chunks.update(where="doc_id = 'guide/borrowing.md'", values={"chunk_count": 7})


def mark_an_old_pipeline(source: Path, dataset: Dataset) -> None:
    dataset.documents.update(
        where="doc_id = 'guide/cargo.md'", values={"pipeline_fingerprint": "0123456789abcdef"}
    )


# corruption → what the audit must report (check, subject)
CORRUPTIONS: dict[Callable[[Path, Dataset], None], set[tuple[Check, str]]] = {
    delete_rows: {(Check.NO_CHUNKS, "guide/errors.md")},
    duplicate_rows: {(Check.DUPLICATE_CHUNK, "guide/borrowing.md:chunk:0000")},
    edit_file: {(Check.FILE_CHANGED, "guide/cargo.md")},
    add_and_remove_files: {
        (Check.NOT_IN_LEDGER, "notes/new.md"),
        (Check.FILE_GONE, "notes/trains.md"),
    },
    zero_a_vector: {(Check.BAD_VECTOR, "notes/tea.md:chunk:0000")},
    drop_the_full_text_index: {(Check.MISSING_INDEX, f"chunks.{SEARCH_TEXT_COLUMN}")},
    forget_a_ledger_row: {
        (Check.ORPHAN_CHUNKS, "notes/trains.md"),
        (Check.NOT_IN_LEDGER, "notes/trains.md"),
    },
    renumber_a_chunk: {(Check.CHUNK_GAP, "guide/borrowing.md")},
    mark_an_old_pipeline: {(Check.OLD_PIPELINE, "guide/cargo.md")},
}


def test_a_clean_index_audits_clean(copy):
    source, dataset = copy
    report = audit(dataset, str(source))
    assert report.clean, report.render()
    assert report.counts["files"] == report.counts["ledger rows"] == len(FILES)


@pytest.mark.parametrize("corrupt", list(CORRUPTIONS), ids=lambda f: f.__name__)
def test_the_audit_finds_each_corruption(copy, corrupt):
    source, dataset = copy
    corrupt(source, dataset)
    report = audit(Dataset(dataset.uri), str(source))
    found = {(p.check, p.subject) for p in report.problems}
    assert CORRUPTIONS[corrupt] <= found, report.render()
    # nothing else is blamed, beyond what the same fault implies
    implied = {Check.CHUNK_COUNT, Check.CHUNK_GAP, Check.UNINDEXED_ROWS}
    expected = {check for check, _ in CORRUPTIONS[corrupt]}
    assert {check for check, _ in found} <= expected | implied, report.render()


def test_a_touched_file_is_refreshed_by_the_next_run_not_reindexed(copy):
    """Same bytes, new mtime: the audit sees the ledger's mtime out of date; the next ingest
    records it without re-indexing, and the audit is clean again."""
    import os

    from flows.ingest import ingest

    source, dataset = copy
    os.utime(source / "guide/errors.md", (1_700_000_000, 1_700_000_000))
    found = audit(Dataset(dataset.uri), str(source)).problems
    assert [(p.check, p.subject, p.detail) for p in found] == [
        (Check.FILE_CHANGED, "guide/errors.md", "mtime")
    ]
    summary = ingest(source_dir=str(source), index_uri=dataset.uri)
    assert (summary.indexed, summary.chunks_written) == (0, 0)
    assert audit(Dataset(dataset.uri), str(source)).clean


def test_a_copy_of_the_folder_records_its_own_files(built, tmp_path):
    """Loads are cached by a file's doc_id and bytes, so a copy of the folder (other paths,
    other mtimes) gets cached documents: its ledger and chunks still name the copy's files,
    its audit is clean, and a second run changes nothing."""
    from flows.ingest import ingest

    source, _ = built
    copy = tmp_path / "copy"
    shutil.copytree(source, copy, copy_function=shutil.copy)  # new mtimes
    uri = str(tmp_path / "index")
    ingest(source_dir=str(copy), index_uri=uri)
    dataset = Dataset(uri)
    paths = dataset.chunks.search().select(["source_path"]).limit(None).to_arrow()
    assert all(path.startswith(str(copy)) for path in paths["source_path"].to_pylist())
    assert audit(dataset, str(copy)).clean
    assert ingest(source_dir=str(copy), index_uri=uri).run_tag == ""


def test_repair_makes_every_corruption_clean_with_a_clean_ingests_chunks(copy, tmp_path):
    """All the corruptions at once: the command exits 3, --repair exits 0, and the chunks
    equal those of a clean ingest of the folder as it now is."""
    from flows.audit import PROBLEMS_FOUND, main
    from flows.ingest import ingest

    source, dataset = copy
    for corrupt in CORRUPTIONS:
        corrupt(source, Dataset(dataset.uri))
    assert RepairPlan.of(audit(Dataset(dataset.uri), str(source))).indexes
    assert main(["--index", dataset.uri]) == PROBLEMS_FOUND  # the folder from the ledger
    assert main(["--index", dataset.uri, "--source", str(source), "--repair"]) == 0
    assert audit(Dataset(dataset.uri), str(source)).clean

    clean = str(tmp_path / "clean")
    ingest(source_dir=str(source), index_uri=clean)
    repaired, reference = _table(Dataset(dataset.uri)), _table(Dataset(clean))
    assert [{k: r[k] for k in COMPARED} for r in repaired] == [
        {k: r[k] for k in COMPARED} for r in reference
    ]
    for mine, theirs in zip(repaired, reference, strict=True):
        assert np.abs(np.asarray(mine[VECTOR_COLUMN]) - theirs[VECTOR_COLUMN]).max() <= 1e-5


def _table(dataset: Dataset) -> list[dict]:
    rows = dataset.chunks.search().select([*COMPARED, VECTOR_COLUMN]).limit(None).to_list()
    return sorted(rows, key=lambda row: row["chunk_id"])


def test_the_command_prints_its_report_once_and_logs_one_line(copy, tmp_path):
    """Without a Prefect API the command starts the project's temporary server, not Prefect's
    (whose start says "See https://www.prefect.io/docs/…"): the report is on stdout once,
    the run's log has the outcome in one line."""
    source, dataset = copy
    edit_file(source, dataset)
    done = run_module(
        "flows.audit",
        "--index",
        dataset.uri,
        "--source",
        str(source),
        env=own_prefect_home(tmp_path / "prefect"),
    )
    assert done.returncode == 3, done.stderr[-3000:]
    assert done.stdout.count("1 problem(s) found") == 1
    assert "file_changed" in done.stdout and "e.g. guide/cargo.md" in done.stdout
    assert "See https://" not in done.stderr and "e.g. guide/cargo.md" not in done.stderr
    assert "; 1 problem(s) found: file_changed 1" in done.stderr  # the run's log line
