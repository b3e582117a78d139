"""A no-change run over a big folder keeps no per-file Prefect state (issue 21): its task runs
and the results it persists do not depend on how many files the folder holds; nor does what
a first run's flow keeps linked to its task runs."""

from __future__ import annotations

import time
from pathlib import Path
from uuid import UUID

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from prefect.context import FlowRunContext

from flows.ingest import ingest
from tasks.dataset.dataset import Dataset

pytestmark = pytest.mark.integration

FILES = 2000


def write_notes(folder: Path, count: int) -> Path:
    """`count` small Markdown notes in 20 folders."""
    for i in range(count):
        note = folder / f"part{i % 20:02d}" / f"note{i:05d}.md"
        note.parent.mkdir(parents=True, exist_ok=True)
        words = " ".join(f"word{(i * 7 + j) % 997}" for j in range(40))
        note.write_text(f"# Note {i}\n\nNote {i} says {words}.\n", "utf-8")
    return folder


def task_run_names(flow_run_id: UUID, expected: set[str]) -> list[str]:
    """The names of a flow run's task runs, once every name in `expected` has reached the API
    (task run states arrive through events, shortly after the run)."""
    names: list[str] = []
    deadline = time.monotonic() + 30
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            runs = client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
            )
            names = sorted(run.name.rsplit("-", 1)[0] for run in runs)
            if expected <= set(names):
                time.sleep(1)  # anything else the run sent arrives too
                runs = client.read_task_runs(
                    flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
                )
                return sorted(run.name.rsplit("-", 1)[0] for run in runs)
            time.sleep(0.2)
    return names


def test_a_no_change_run_over_2000_files_holds_no_per_file_prefect_state(
    prefect_backend: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, uri = write_notes(tmp_path / "notes", FILES), str(tmp_path / "index")
    linked: list[int] = []
    finalize = Dataset.finalize

    def counting_finalize(self: Dataset, run_tag: str) -> int:
        context = FlowRunContext.get()
        assert context is not None
        linked.append(len(context.run_results))
        return finalize(self, run_tag)

    monkeypatch.setattr(Dataset, "finalize", counting_finalize)
    first = ingest(source_dir=str(folder), index_uri=uri, model="hash:64")
    assert first.indexed == FILES and not first.failed
    # Prefect links each element of a task's returned list to its task run for the whole
    # flow run; the flow drops those of the loads' documents and the splits' results.
    assert linked and linked[0] < FILES / 10, linked
    stored = sorted(prefect_backend.rglob("*"))

    state = ingest(source_dir=str(folder), index_uri=uri, model="hash:64", return_state=True)
    summary = state.result()
    assert (summary.unchanged, summary.indexed, summary.removed) == (FILES, 0, 0)

    flow_run_id = state.state_details.flow_run_id
    assert flow_run_id is not None
    names = task_run_names(flow_run_id, {"plan", "delete"})
    # the scan and its diff, and deleting nothing: two task runs whatever the folder holds
    assert names == ["delete", "plan"], names
    assert sorted(prefect_backend.rglob("*")) == stored, "a no-change run persisted results"
