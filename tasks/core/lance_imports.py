"""Every place doc-indexer relies on LanceDB's internals, here and nowhere else: LanceDB
imported without the cost of its REST namespace client, and a sync table's async handle
(`async_handle`). tests/test_lance_imports.py fails when either stops holding; LanceDB is
pinned to the minor version it passed on (pyproject.toml).

`import lancedb` imports `lance_namespace`, which re-exports about a hundred request and
response models of `lance_namespace_urllib3_client`, a generated OpenAPI client. That
client's package `__init__` imports every API class (each method wrapped in pydantic's
`validate_call`) and its `models` package every model: about half of `import lancedb`
(benchmarks/RESULTS.md, "Everyday paths"), although a local or `s3://` dataset never talks
to a REST namespace.

`install()` registers both packages as lazy modules before LanceDB is imported: a model
named in `models/__init__.py` is imported from its own module when first asked for; any
other attribute runs the package's real `__init__` first, so nothing is missing, only late.
It does nothing where the client is already imported or not installed. `tasks/__init__.py`
calls it, so every process that imports this project's code gets it.

`async_handle(table)`: LanceDB's sync `LanceTable` keeps an `AsyncTable` as its private
`_table` and runs every call through it. The searcher queries that handle on its own event
loop (tasks/dataset/chunk_store.py), so both APIs read one table: its version, read
consistency and index caches. LanceDB is imported only inside it: this module runs at every
start.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import re
import sys
import types
from pathlib import Path
from typing import Any

CLIENT = "lance_namespace_urllib3_client"
MODELS = f"{CLIENT}.models"
# "from lance_namespace_urllib3_client.models.add_columns_entry import AddColumnsEntry"
_MODEL_IMPORT = re.compile(rf"^from ({re.escape(MODELS)}\.\w+) import (\w+)\s*$", re.M)


class LazyPackage(types.ModuleType):
    """A package whose `__init__` has not run: `names` (attribute → module) import alone;
    any other attribute runs the real `__init__` in this module's namespace first."""

    def __init__(self, spec: importlib.machinery.ModuleSpec, names: dict[str, str]):
        super().__init__(spec.name)
        self.__spec__ = spec
        self.__file__ = spec.origin
        self.__path__ = list(spec.submodule_search_locations or ())
        self.__package__ = spec.name
        self.__loader__ = spec.loader
        self._lazy_names = names
        self._lazy_ran = False

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__") or attribute.startswith("_lazy"):
            raise AttributeError(attribute)
        module = self._lazy_names.get(attribute)
        if module is not None:
            value = getattr(importlib.import_module(module), attribute)
            setattr(self, attribute, value)
            return value
        if not self._lazy_ran:
            self._lazy_ran = True
            source = Path(str(self.__file__)).read_text("utf-8")
            exec(compile(source, str(self.__file__), "exec"), self.__dict__)
            if attribute in self.__dict__:
                return self.__dict__[attribute]
        raise AttributeError(f"module {self.__name__!r} has no attribute {attribute!r}")


def install() -> bool:
    """Register the client's package and its models package as LazyPackages; False where the
    client is imported already or not installed (then nothing changes)."""
    if CLIENT in sys.modules:
        return False
    client_spec = importlib.util.find_spec(CLIENT)
    if client_spec is None or not client_spec.submodule_search_locations or not client_spec.origin:
        return False
    models_spec = importlib.machinery.PathFinder.find_spec(
        MODELS, list(client_spec.submodule_search_locations)
    )
    if models_spec is None or not models_spec.origin:
        return False
    names = {
        name: module
        for module, name in _MODEL_IMPORT.findall(Path(models_spec.origin).read_text("utf-8"))
    }
    client = LazyPackage(client_spec, {})
    models = LazyPackage(models_spec, names)
    sys.modules[CLIENT], sys.modules[MODELS] = client, models
    client.models = models  # type: ignore[attr-defined]
    return True


def async_handle(table: Any) -> Any:
    """The `AsyncTable` that an open local or object-store `LanceTable` runs its calls
    through (its `_table`); TypeError for any other table."""
    from lancedb.table import AsyncTable, LanceTable

    handle = getattr(table, "_table", None) if isinstance(table, LanceTable) else None
    if not isinstance(handle, AsyncTable):
        raise TypeError(f"{table!r} has no async handle (not a local or object-store table)")
    return handle
