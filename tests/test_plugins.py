"""Formats and embedding backends are found, not listed (tasks/core/plugins.py): the modules
of their package, then what installed distributions name under the entry-point groups."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tasks.core.plugins import BACKENDS_GROUP, READERS_GROUP, load_plugins
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


# A third party's format: its facts and its reader in one module.
THIRD_PARTY_READER = """
from tasks.core.records import Block, Metadata
from tasks.parse.registry import Format, Reading, register


def read_toy(source, data, options):
    first, _, rest = data.decode("utf-8").partition("\\n")
    title = first.removeprefix("title:").strip()
    return Reading([Block(rest.strip())], metadata=Metadata(title=title))


register(Format("toy", "text/x-toy", (".toy",)), read_toy, ())
"""


def _distribution(site: Path, group: str, name: str, module: str, *more: str) -> None:
    """An installed distribution in `site` whose entry point `name` of `group` is `module`
    (`more`: further groups, names and modules, three by three)."""
    info = site / "third_party_ones-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: third-party-ones\nVersion: 0.1\n")
    points = (group, name, module, *more)
    text = "".join(f"[{g}]\n{n} = {m}\n" for g, n, m in zip(*[iter(points)] * 3, strict=True))
    (info / "entry_points.txt").write_text(text, "utf-8")


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


def test_another_package_adds_a_model_and_a_format_by_their_entry_points(tmp_path):
    """A fresh interpreter with a third party's distribution on its path, with no line of
    this repository changed: `--model ones` is known, listed, loaded and recorded; `.toy`
    files are found, `--type toy` is known, and the files are read by the package's reader.
    (One interpreter for both: each start imports the project.)"""
    site = tmp_path / "site"
    package = site / "ones_package"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("", "utf-8")
    (package / "ones_backend.py").write_text(THIRD_PARTY_BACKEND, "utf-8")
    (package / "toy_reader.py").write_text(THIRD_PARTY_READER, "utf-8")
    _distribution(
        site,
        BACKENDS_GROUP,
        "ones",
        "ones_package.ones_backend",
        READERS_GROUP,
        "toy",
        "ones_package.toy_reader",
    )
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "note.toy").write_text("title: A toy note\nPelicans fly in lines.\n", "utf-8")
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(site)!r})
        from tasks.embed.models import BACKENDS, get_embedder, known_specs, model_info
        print(BACKENDS["ones"].module, model_info("ones").model_id)
        print(get_embedder("ones").encode(["a b"]).tolist())
        print("ones:MODEL" in known_specs())
        from tasks.parse.formats import MIME_TYPES
        from tasks.ingest.discover import discover
        from tasks.parse.document import load_document
        from tasks.search.params import SearchParams
        [source] = discover({str(folder)!r}).files
        doc = load_document(source)
        print(MIME_TYPES[".toy"], SearchParams(type="toy").mime_type, source.doc_id)
        print(doc.status, doc.title, [block.text for block in doc.blocks])
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:5] == [
        "ones_package.ones_backend third-party/ones",
        "[[0.5, 0.5, 0.5, 0.5]]",
        "True",
        "text/x-toy text/x-toy note.toy",
        "indexed A toy note ['Pelicans fly in lines.']",
    ]


def test_a_reader_entry_point_must_register_a_new_format(tmp_path, monkeypatch):
    from tasks.parse import registry

    site = tmp_path / "site"
    (site / "clash_package").mkdir(parents=True)
    (site / "clash_package" / "__init__.py").write_text("", "utf-8")
    (site / "clash_package" / "md2_reader.py").write_text(
        "from tasks.parse.registry import Format, Reading, register\n"
        "register(Format('md2', 'text/x-md2', ('.md',)), lambda s, d, o: Reading([]), ())\n",
        "utf-8",
    )
    (site / "clash_package" / "old_reader.py").write_text(
        "from tasks.parse.registry import Reading, register\n"
        "register('md', lambda s, d, o: Reading([]), ())\n",
        "utf-8",
    )
    _distribution(site, READERS_GROUP, "md2", "clash_package.md2_reader")
    monkeypatch.syspath_prepend(str(site))
    registry.readers()  # the built-in formats, registered before the package's
    with pytest.raises(ValueError, match="'md2' takes a name or suffix"):
        load_plugins(registry.READERS_PACKAGE, READERS_GROUP)
    (site / "third_party_ones-0.1.dist-info" / "entry_points.txt").write_text(
        f"[{READERS_GROUP}]\nmd = clash_package.old_reader\n", "utf-8"
    )
    with pytest.raises(ValueError, match="names no Format"):
        load_plugins(registry.READERS_PACKAGE, READERS_GROUP)
