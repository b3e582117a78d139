"""Formats and embedding backends are found, not listed (tasks/core/plugins.py): the modules
of their package, then what installed distributions name under the entry-point groups."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tasks.core.plugins import BACKENDS_GROUP, load_plugins
from tasks.embed.registry import Backend, register

from .conftest import ROOT

THIRD_PARTY_BACKEND = """
import numpy as np

from tasks.embed.base import ModelInfo
from tasks.embed.registry import Backend, register


class Ones:
    info = ModelInfo("third-party/ones", 4, 64)

    def encode(self, texts):
        return np.ones((len(texts), 4), np.float32) / 2

    def count_tokens(self, texts):
        return [len(text.split()) for text in texts]


register(
    Backend(
        name="ones",
        module=__name__,
        summary="a third party's backend",
        default_model="4",
        info=lambda model: Ones.info,
        load=lambda model: Ones(),
        model_of=lambda model_id: "4" if model_id == "third-party/ones" else None,
    )
)
"""


def _distribution(site: Path, group: str, name: str, module: str) -> None:
    """An installed distribution in `site` whose entry point `name` of `group` is `module`."""
    info = site / "third_party_ones-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: third-party-ones\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{name} = {module}\n", "utf-8")


def test_a_package_of_modules_is_imported_in_name_order_by_suffix(tmp_path, monkeypatch):
    package = tmp_path / "some_plugins"
    package.mkdir()
    (package / "__init__.py").write_text("ORDER = []\n", "utf-8")
    for name in ("b_backend", "a_backend", "helper"):
        (package / f"{name}.py").write_text(
            f"from some_plugins import ORDER\nORDER.append({name!r})\n", "utf-8"
        )
    monkeypatch.syspath_prepend(str(tmp_path))
    names = load_plugins("some_plugins", "doc_indexer.tests-none", suffix="_backend")
    assert names == ["some_plugins.a_backend", "some_plugins.b_backend"]
    assert sys.modules["some_plugins"].ORDER == ["a_backend", "b_backend"]
    assert "some_plugins.helper" not in sys.modules


def test_another_package_adds_an_embedding_backend_by_its_entry_point(tmp_path):
    """A fresh interpreter with a third party's distribution on its path: `--model ones`
    is known, listed, loaded and recorded, with no line of this repository changed."""
    site = tmp_path / "site"
    (site / "ones_package").mkdir(parents=True)
    (site / "ones_package" / "__init__.py").write_text("", "utf-8")
    (site / "ones_package" / "ones_backend.py").write_text(THIRD_PARTY_BACKEND, "utf-8")
    _distribution(site, BACKENDS_GROUP, "ones", "ones_package.ones_backend")
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(site)!r})
        from tasks.embed.models import BACKENDS, get_embedder, known_specs, model_info
        print(BACKENDS["ones"].module, model_info("ones").model_id)
        print(get_embedder("ones").encode(["a b"]).tolist())
        print("ones:MODEL" in known_specs())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:3] == [
        "ones_package.ones_backend third-party/ones",
        "[[0.5, 0.5, 0.5, 0.5]]",
        "True",
    ]


def test_a_backend_says_which_module_registers_it():
    backend = Backend(
        name="nameless",
        summary="x",
        default_model=None,
        info=lambda model: None,  # type: ignore[arg-type,return-value]
        load=lambda model: None,  # type: ignore[arg-type,return-value]
        model_of=lambda model_id: None,
    )
    with pytest.raises(ValueError, match="module=__name__"):
        register(backend)
