"""Plugins are found, not listed: the modules of a package, then a group's entry points.

Document formats (tasks/parse/readers/) and embedding backends (the `*_backend` modules of
tasks/embed/) register themselves when imported. `load_plugins` imports every such module of
the package, in name order, then whatever installed distributions name under the group's
entry points, so that a package of one's own adds a format or a model without editing this
repository; in its pyproject.toml:

    [project.entry-points."doc_indexer.backends"]
    my-model = "my_package.my_backend"

A format is likewise one module, under `doc_indexer.readers`, that registers the format with
its reader (tasks/parse/registry.py):

    [project.entry-points."doc_indexer.readers"]
    toy = "my_package.toy_reader"
"""

from __future__ import annotations

import importlib
import pkgutil
from importlib.metadata import entry_points

READERS_GROUP = "doc_indexer.readers"
BACKENDS_GROUP = "doc_indexer.backends"


def load_plugins(package: str, group: str, suffix: str = "") -> list[str]:
    """Import the modules of `package` whose names end with `suffix`, then the modules the
    entry points of `group` name; their names, in the order imported."""
    found = importlib.import_module(package)
    names = sorted(
        f"{package}.{module.name}"
        for module in pkgutil.iter_modules(found.__path__)
        if module.name.endswith(suffix) and not module.ispkg
    )
    names += [point.value.partition(":")[0] for point in entry_points(group=group)]
    for name in names:
        importlib.import_module(name)
    return names
