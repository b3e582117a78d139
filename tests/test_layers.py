"""The architecture holds: no import cycles, and every module imports only its layer or below.

Imports are read from the source (every `import` and `from … import`, inside functions too),
so a lazy import counts as much as one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

from .conftest import ROOT

PACKAGES = ("tasks", "flows", "deployments")
# Lower layers first; packages on one line are siblings that must not import each other.
LAYERS = (
    ("tasks.core",),
    ("tasks.text", "tasks.embed", "tasks.parse"),
    ("tasks.dataset",),
    ("tasks.ingest", "tasks.search", "tasks.eval"),
    ("flows",),
    ("deployments",),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {
        module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")
    }


def imports_of(path: Path, modules: dict[str, Path], module: str | None = None) -> set[str]:
    """The project modules that the file of `module` imports (a name imported from a package
    counts as its submodule when there is one)."""
    module = module or module_name(path)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    found.discard(module)
    return {name for name in found if name not in _parents(module)}


def _parents(module: str) -> set[str]:
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imports_of(path, modules) for name, path in modules.items()}


def layer_of(module: str) -> tuple[int, str]:
    if module == "tasks":  # the package only sets up the offline environment, from core
        return 0, "tasks.core"
    for rank, siblings in enumerate(LAYERS):
        for package in siblings:
            if module == package or module.startswith(package + "."):
                return rank, package
    raise AssertionError(f"{module} is in no layer: add its package to LAYERS")


def test_there_are_no_import_cycles():
    edges = graph()
    state: dict[str, str] = {}
    cycles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(edges[module]):
            if state.get(target) == "open":
                cycles.append(path[path.index(target) :] + [target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert cycles == [], "import cycles: " + "; ".join(" → ".join(c) for c in cycles)


def test_every_module_imports_only_its_own_layer_or_lower_ones():
    wrong = []
    for module, targets in graph().items():
        rank, package = layer_of(module)
        for target in targets:
            target_rank, target_package = layer_of(target)
            upward = target_rank > rank
            sideways = target_rank == rank and target_package != package
            if upward or sideways:
                wrong.append(f"{module} → {target}")
    assert wrong == [], "imports against the layers (see tasks/__init__.py): " + ", ".join(wrong)


def test_the_layer_check_sees_imports_inside_functions(tmp_path):
    """The walker is not fooled by an import hidden in a function body."""
    source = tmp_path / "probe.py"
    source.write_text("def f():\n    from flows.ingest import ingest\n", "utf-8")
    assert imports_of(source, project_modules(), "tasks.probe") == {"flows.ingest"}
