"""Every Prefect cache key in doc-indexer, computed from content in one place.

A key is the sha256 of: the step name, the code that computes the step, and a content token
for each task input: a file's doc_id plus the hash of its bytes, a document's loaded blocks, a
chunk's text hash, a settings model's fields. Never a path alone, and never the flow run id
(Prefect's default policy includes it, which would make caching useless across runs).

The code is found, not listed: the module that defines the step's function, plus the modules
that the step loads by name for its inputs (every reader of tasks/parse/registry.py; the
embedding backend(s) of the model spec, tasks/embed/models.py), and every project module that
these import, transitively, read from their source files with `ast` (imports inside functions
count; nothing depends on what this process happens to have imported). The key hashes those
files' source and the versions of the installed distributions that they import, with every
distribution those require. So an edit to any code or library that can change a step's output
changes its key; computed once per process for each set of modules.

The write step has no cache: a cached write could claim rows that are not in the table
(e.g. after the dataset folder was deleted); writes are idempotent instead.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.metadata
import json
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from prefect.cache_policies import CachePolicy
from pydantic import BaseModel

from tasks.core.records import Chunk, Document, SourceFile, sha256_hex
from tasks.embed.models import embedding_code
from tasks.parse.registry import reader_code

PACKAGE = __name__.partition(".")[0]  # the project's package: its modules are followed
PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds the package


def content_token(value: Any) -> Any:
    """A JSON-able stand-in for a task input that changes exactly when its content does."""
    if isinstance(value, SourceFile):
        return ["file", value.doc_id, value.content_hash]
    if isinstance(value, Document):
        return ["doc", value.doc_id, value.source.content_hash, sha256_hex(repr(value))]
    if isinstance(value, Chunk):
        return value.text_hash
    if isinstance(value, list | tuple):
        return [content_token(item) for item in value]
    if isinstance(value, BaseModel):
        return [type(value).__name__, value.model_dump_json()]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [type(value).__name__, repr(value)]
    if isinstance(value, str) and len(value) > 64:
        return sha256_hex(value)  # a text to embed: its hash stands for it
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise TypeError(f"no content token for task input of type {type(value).__name__}")


# --- The code: project modules, followed through their imports -------------------------------


def module_file(name: str, root: Path) -> Path | None:
    """The source file of the project module `name` under `root`; None if it is no module."""
    if name.partition(".")[0] != PACKAGE:
        return None
    path = root.joinpath(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@dataclass(frozen=True)
class Imports:
    """What one module's source imports: project modules and other top-level names."""

    modules: frozenset[str]
    libraries: frozenset[str]


def module_source(name: str, root: Path) -> tuple[Path, bytes]:
    """The file and source of the project module `name` under `root`."""
    path = module_file(name, root)
    if path is None:
        raise ModuleNotFoundError(f"no module {name!r} of the package {PACKAGE} under {root}")
    return path, path.read_bytes()


def imports_of(name: str, root: Path) -> Imports:
    """The imports of the project module `name` (read from its source, those inside functions
    too); a name imported from a package counts as its submodule when there is one."""
    path, source = module_source(name, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    modules: set[str] = set()
    libraries: set[str] = set()
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package `level - 1` steps above this one's
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for imported in names:
            if imported.partition(".")[0] != PACKAGE:
                libraries.add(imported.partition(".")[0])
                continue
            while imported and module_file(imported, root) is None:
                imported = imported.rpartition(".")[0]
            if imported:
                modules.add(imported)
    return Imports(frozenset(modules), frozenset(libraries - set(sys.stdlib_module_names)))


@cache
def code_closure(roots: tuple[str, ...], root: Path = PROJECT_ROOT) -> Imports:
    """Every project module that importing `roots` runs (their packages' __init__ included),
    and the top-level names of the libraries that any of them imports."""
    seen: set[str] = set()
    libraries: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:end]) for end in range(1, len(parts))]  # the packages above
        found = imports_of(name, root)
        todo += found.modules
        libraries |= found.libraries
    return Imports(frozenset(seen), frozenset(libraries))


# --- The libraries: installed distributions and the ones they require ------------------------


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@cache
def _distributions_of_imports() -> Mapping[str, list[str]]:
    """Top-level import name → the distributions that install it (read once per process)."""
    return importlib.metadata.packages_distributions()


@cache
def _installed(distribution: str) -> tuple[str | None, tuple[str, ...]]:
    """(version or None when not installed, the names of the distributions it requires)."""
    try:
        found = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None, ()
    # A requirement's name leads its PEP 508 string. Those of the distribution's extras are
    # left out (a library that the project needs through an extra, it imports itself); other
    # markers are not evaluated: one that does not apply here is simply not installed.
    required = (
        re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
        for requirement in found.requires or []
        if not re.search(r";.*\bextra\b", requirement)
    )
    return found.version, tuple(_canonical(match.group()) for match in required if match)


def library_versions(import_names: Iterable[str]) -> dict[str, str | None]:
    """Distribution → installed version (None: not installed) for the distributions that
    provide `import_names`, and every distribution they require, transitively. An import
    name that no distribution provides stands for itself (its version: None)."""
    provided = _distributions_of_imports()
    todo = [_canonical(dist) for name in import_names for dist in provided.get(name, [name])]
    versions: dict[str, str | None] = {}
    while todo:
        distribution = todo.pop()
        if distribution in versions:
            continue
        versions[distribution], required = _installed(distribution)
        todo += required
    return dict(sorted(versions.items()))


@cache
def code_version(roots: tuple[str, ...], root: Path = PROJECT_ROOT) -> str:
    """Hash of the source of every project module in `roots`' closure (read under `root`)
    and of the versions of the libraries they import. Once per process for each `roots`."""
    closure = code_closure(roots, root)
    sources = [[name, sha256_hex(module_source(name, root)[1])] for name in sorted(closure.modules)]
    payload = [sources, sorted(library_versions(closure.libraries).items())]
    return sha256_hex(json.dumps(payload))


# --- The policy ------------------------------------------------------------------------------

# The modules that a step loads by name (not by an import line) for its inputs.
LoadedCode = Callable[[Mapping[str, Any]], Iterable[str]]


def no_loaded_code(inputs: Mapping[str, Any]) -> tuple[str, ...]:
    return ()


def every_reader(inputs: Mapping[str, Any]) -> tuple[str, ...]:
    """Every reader's modules, whatever the files: a reader may hand a part of its file to
    another one (an email's attachments are read by their own format's reader)."""
    return reader_code()


def model_code(inputs: Mapping[str, Any]) -> tuple[str, ...]:
    """The modules of the embedding backend(s) of the step's `model` spec."""
    return embedding_code(str(inputs["model"]))


@dataclass
class ContentKey(CachePolicy):
    """Cache key from the step's code and its inputs' content; nothing else."""

    step: str = ""
    modules: tuple[str, ...] = ()  # the modules that define the step's function
    loaded: LoadedCode = no_loaded_code  # what else it loads for given inputs
    root: Path = PROJECT_ROOT  # where the sources are read (tests point it at a copy)
    ignored: tuple[str, ...] = ()  # inputs that change how the step runs, never its result

    def roots(self, inputs: Mapping[str, Any]) -> tuple[str, ...]:
        return tuple(sorted({*self.modules, *self.loaded(inputs)}))

    def code_modules(self, inputs: Mapping[str, Any]) -> frozenset[str]:
        """Every project module whose source the key for `inputs` covers."""
        return code_closure(self.roots(inputs), self.root).modules

    def compute_key(
        self, task_ctx: Any, inputs: dict[str, Any], flow_parameters: Any, **kwargs: Any
    ) -> str:
        payload: list[Any] = [self.step, code_version(self.roots(inputs), self.root)]
        payload += [
            [name, content_token(value)]
            for name, value in sorted(inputs.items())
            if name not in self.ignored
        ]
        return f"{self.step}-{sha256_hex(json.dumps(payload))}"


def step_cache(
    step: str, function: Callable[..., Any], loaded: LoadedCode, ignored: tuple[str, ...] = ()
) -> ContentKey:
    """The cache policy of the step `step`, computed by `function` (its module is followed),
    whose `ignored` inputs never change its result."""
    return ContentKey(step=step, modules=(function.__module__,), loaded=loaded, ignored=ignored)
