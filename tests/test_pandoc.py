"""unstructured's EPUB, ODT and RTF partitioners run the pandoc of the pypandoc-binary wheel:
never a download, never another pandoc found on PATH."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tasks.parse.pandoc import PANDOC_ENV, bundled_pandoc, use_bundled_pandoc

from .conftest import ROOT
from .document_files import make_rtf


def test_the_bundled_pandoc_is_the_one_pypandoc_uses():
    import pypandoc

    assert bundled_pandoc().is_file()
    version = use_bundled_pandoc()
    assert version.split(".")[0].isdigit()
    if os.environ.get(PANDOC_ENV) == str(bundled_pandoc()):  # unless the user chose another
        assert pypandoc.get_pandoc_path() == str(bundled_pandoc())


def test_a_newer_pandoc_on_path_and_the_network_are_left_alone(tmp_path):
    """pypandoc would take the newest pandoc it finds; a fake one on PATH claiming 99.0 (and
    failing every conversion) must not be used, and nothing may be downloaded."""
    fake = tmp_path / "bin" / "pandoc"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "pandoc 99.0"\n[ "$1" = "--version" ] || exit 3\n')
    fake.chmod(0o755)
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "note.rtf").write_bytes(make_rtf("# Pandoc\n\nOnly the bundled one.\n"))
    script = textwrap.dedent(
        f"""
        import socket

        def refuse(*args, **kwargs):
            raise OSError("network access attempted")

        socket.socket.connect = refuse
        socket.create_connection = refuse
        import pypandoc, pypandoc.pandoc_download
        pypandoc.download_pandoc = pypandoc.pandoc_download.download_pandoc = refuse

        from tasks.ingest.discover import discover
        from tasks.parse.document import load_document

        doc = load_document(discover({str(tmp_path / "corpus")!r}).files[0])
        assert doc.status == "indexed", doc.error
        assert [b.text for b in doc.blocks] == ["Pandoc", "Only the bundled one."], doc.blocks
        print("PANDOC", pypandoc.get_pandoc_path())
        """
    )
    env = {k: v for k, v in os.environ.items() if k != PANDOC_ENV}
    env["PATH"] = f"{fake.parent}{os.pathsep}{env.get('PATH', '')}"
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"PANDOC {bundled_pandoc()}" in result.stdout
