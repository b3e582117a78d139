"""The canary of tasks/core/lance_imports.py: LanceDB opens, writes and searches (vector and
full text) with its REST namespace client's API classes never imported, in a fresh process;
the lazy packages still give whatever is asked of them; a sync table's async handle is found."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .conftest import ROOT

CANARY = textwrap.dedent(
    """
    import json, sys
    import tasks  # installs the lazy packages
    from tasks.core import lance_imports
    import lancedb
    import pyarrow as pa

    db = lancedb.connect(sys.argv[1])
    table = db.create_table("t", pa.table({
        "id": [1, 2, 3],
        "text": ["a lighthouse keeper", "sourdough bread", "honey bees dance"],
        "vector": pa.array([[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]], pa.list_(pa.float32(), 2)),
    }))
    table.create_fts_index("text")
    by_vector = table.search([1.0, 0.0]).limit(1).to_list()[0]["id"]
    by_text = table.search("bread", query_type="fts").limit(1).to_list()[0]["id"]
    client = sys.modules[lance_imports.CLIENT]
    print(json.dumps({
        "lazy": isinstance(client, lance_imports.LazyPackage),
        "apis": sorted(m for m in sys.modules if m.startswith(lance_imports.CLIENT + ".api")),
        "models": len([m for m in sys.modules if m.startswith(lance_imports.MODELS + ".")]),
        "found": [by_vector, by_text],
    }))
    """
)


def test_lancedb_works_without_the_namespace_clients_apis(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", CANARY, str(tmp_path / "db")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["lazy"], "the client was imported before tasks/core/lance_imports.py ran"
    assert report["apis"] == [], "LanceDB now imports the REST client's API classes"
    assert report["models"] > 0  # lance_namespace still gets the models it re-exports
    assert report["found"] == [1, 2]


def test_the_lazy_packages_give_what_is_asked_of_them() -> None:
    asked = textwrap.dedent(
        """
        import sys
        import tasks
        from lance_namespace_urllib3_client.models import CreateTableRequest
        from lance_namespace_urllib3_client import ApiClient  # not a model: the real __init__
        from lance_namespace_urllib3_client.models.create_table_request import (
            CreateTableRequest as Direct,
        )
        assert CreateTableRequest is Direct and ApiClient.__name__ == "ApiClient"
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", asked], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.stdout.strip() == "ok", result.stderr


def test_a_sync_table_runs_through_the_async_handle_found(tmp_path: Path) -> None:
    """`async_handle` finds the AsyncTable a LanceTable keeps: the same table (a row added
    through the sync API is counted by the handle without reopening), and only for a table
    that has one."""
    import asyncio

    import lancedb
    import pyarrow as pa
    from lancedb.table import AsyncTable

    from tasks.core.lance_imports import async_handle

    table = lancedb.connect(str(tmp_path / "db")).create_table("t", pa.table({"id": [1, 2]}))
    handle = async_handle(table)
    assert isinstance(handle, AsyncTable) and async_handle(table) is handle
    table.add(pa.table({"id": [3]}))
    assert asyncio.run(handle.count_rows()) == 3
    assert asyncio.run(handle.version()) == table.version
    with pytest.raises(TypeError):
        async_handle(object())  # not a LanceDB table: no async handle
