"""The ingest flow on a two-worker Dask cluster writes the same table as the thread runner."""

from __future__ import annotations

import lancedb
import numpy as np
import pytest

from tasks.dataset.dataset import Dataset
from tasks.dataset.schema import CHUNKS_TABLE
from tasks.embed.models import DEFAULT_MODEL, model_info

pytestmark = pytest.mark.integration


def _table(uri: str) -> dict[str, tuple[str, np.ndarray]]:
    """chunk_id -> (text_hash, vector) of a dataset's chunks table."""
    rows = lancedb.connect(uri).open_table(CHUNKS_TABLE).to_arrow().to_pylist()
    return {row["chunk_id"]: (row["text_hash"], np.asarray(row["vector"])) for row in rows}


def _embedder_calls() -> dict[str, int]:
    """Run on each Dask worker: how often it looked up, and how often it loaded, the model."""
    from tasks.embed.models import DEFAULT_MODEL, embedder_cache_info

    calls, loads = embedder_cache_info(DEFAULT_MODEL)
    return {"calls": calls, "loads": loads}


def test_dask_cluster_writes_the_same_rows_as_threads(small_index, tmp_path):
    from distributed import Client, LocalCluster
    from prefect.settings import PREFECT_TASKS_REFRESH_CACHE, temporary_settings

    from flows.ingest import ingest
    from flows.runners import RunnerSettings, make_task_runner

    # The threads' table: the session's small index, the small corpus ingested with the
    # defaults (the thread runner, one batch of every file).
    source, threads = str(small_index.corpus), small_index.summary
    # Recompute every task: the Dask run must not take the threads run's cached results.
    with temporary_settings({PREFECT_TASKS_REFRESH_CACHE: True}):
        # One batch of every file there, one per file here: each text shares its model call
        # with other texts, yet gets the same vector (the default backend, per-token int8).
        with (
            LocalCluster(
                n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
            ) as cluster,
            Client(cluster) as client,
        ):
            runner = RunnerSettings(task_runner="dask", dask_address=cluster.scheduler_address)
            on_dask = ingest.with_options(task_runner=make_task_runner(runner))(
                source_dir=source, index_uri=str(tmp_path / "dask"), batch_size=1
            )
            per_worker = client.run(_embedder_calls)

    assert threads.indexed == on_dask.indexed == 5 and not on_dask.failed
    built = model_info(DEFAULT_MODEL).model_id
    assert Dataset(small_index.uri).built_with() == built, "the default backend"
    assert on_dask.chunks_embedded == threads.chunks_embedded > 0
    expected, got = _table(small_index.uri), _table(str(tmp_path / "dask"))
    assert sorted(got) == sorted(expected)
    for chunk_id, (text_hash, vector) in expected.items():
        assert got[chunk_id][0] == text_hash
        np.testing.assert_allclose(got[chunk_id][1], vector, atol=1e-5)
    # Every batch was embedded on a worker, and each worker loaded the model at most once.
    assert len(per_worker) == 2
    assert sum(calls["calls"] for calls in per_worker.values()) == 5
    assert all(calls["loads"] <= 1 for calls in per_worker.values())
