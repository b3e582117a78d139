"""Loading real files with unstructured: every format, encodings, metadata, offline."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tasks.core.reasons import Reason, Status
from tasks.ingest.discover import discover
from tasks.parse.decode import decode_text
from tasks.parse.document import ReadOptions, load_document
from tasks.parse.formats import TYPES

from .conftest import ROOT, SAMPLE, SHARED, shared_path
from .document_files import make_eml, make_epub, make_odt, make_rtf
from .office_files import MAKERS

DOCUMENT_MAKERS = {"odt": make_odt, "rtf": make_rtf, "epub": make_epub, "eml": make_eml}

INDEXED, EMPTY, FAILED = Status.INDEXED, Status.EMPTY, Status.FAILED


def load(path: Path, root: Path):
    source = next(s for s in discover(root).files if Path(s.path) == path.resolve())
    return load_document(source)


def test_markdown_keeps_heading_paths():
    doc = load(SAMPLE / "rust-book/ch04-01-what-is-ownership.md", SAMPLE)
    assert doc.status == INDEXED
    assert doc.title == "What Is Ownership?"
    sections = {b.section for b in doc.blocks}
    assert "What Is Ownership? > The Stack and the Heap" in sections
    heap = next(b for b in doc.blocks if b.section.endswith("The Stack and the Heap"))
    assert heap.heading_level == 3, "### in the source"
    assert any("ownership" in b.text.lower() for b in doc.blocks)


def test_html_drops_navigation_and_keeps_sections():
    doc = load(SAMPLE / "python-docs/venv.html", SAMPLE)
    assert doc.status == INDEXED
    text = " ".join(b.text for b in doc.blocks)
    assert "virtual environment" in text
    assert "¶" not in text, "Sphinx heading anchors are page chrome"
    assert "Navigation" not in {b.text for b in doc.blocks}
    assert any(
        b.heading_level == 2 and "Creating Virtual Environments" in b.section for b in doc.blocks
    )


# A DocBook chapter page as Debian's manuals ship it: a table of contents, then the sections.
TOC_PAGE = """<html><body><div class="chapter">
<h1 class="title">Chapter 4. Required files under the debian directory</h1>
<div class="toc"><p><b>Table of Contents</b></p><dl class="toc">
<dt><a href="#control">4.1. control</a></dt>
<dt><a href="#copyright">4.2. copyright</a></dt>
<dt><a href="#changelog">4.3. changelog</a></dt>
<dt><a href="#rules">4.4. rules</a></dt>
</dl></div>
<p>There is a new subdirectory under the program's source directory, called debian.</p>
<h2 id="control">4.1. control</h2><p>This file contains values which dpkg uses.</p>
<h2 id="copyright">4.2. copyright</h2><p>This file contains the licence of the sources.</p>
<h2 id="changelog">4.3. changelog</h2><p>This file records the changes of each version.</p>
<h2 id="rules">4.4. rules</h2><p>This file is a Makefile that builds the package.</p>
</div></body></html>
"""


def test_a_table_of_contents_is_left_out_of_the_text(tmp_path):
    """Links one after another (a table of contents, a list of pages) and their label are
    navigation, not text: no block holds them; the sections they point to are there. A page
    that is nothing but links keeps them: they are its content."""
    (tmp_path / "dreq.html").write_text(TOC_PAGE, "utf-8")
    doc = load(tmp_path / "dreq.html", tmp_path)
    texts = [block.text for block in doc.blocks]
    assert "Table of Contents" not in texts
    assert texts.count("4.1. control") == 1, "the heading only, not its entry in the contents"
    assert any("values which dpkg uses" in text for text in texts)
    links = "".join(f'<p><a href="p{i}.html">Page {i}</a></p>' for i in range(5))
    (tmp_path / "pages.html").write_text(f"<html><body>{links}</body></html>", "utf-8")
    pages = load(tmp_path / "pages.html", tmp_path)
    assert [block.text for block in pages.blocks] == [f"Page {i}" for i in range(5)]


def test_chinese_html_yields_chinese_text():
    doc = load(SAMPLE / "debian-handbook-zh-cn/sect.apt-file.html", SAMPLE)
    assert doc.status == INDEXED
    assert "apt-file" in doc.title
    assert any("软件包" in b.text for b in doc.blocks)


def test_pdf_text_layer_with_page_numbers(small_corpus):
    doc = load(small_corpus / "r-manuals/R-FAQ-excerpt.pdf", small_corpus)
    assert doc.status == INDEXED
    assert {b.page_number for b in doc.blocks} == {1, 2, 3, 4, 5}
    assert sum(len(b.text) for b in doc.blocks) > 5000


def test_chinese_pdf_yields_chinese_text():
    doc = load(SAMPLE / "ctex/ctex-faq.pdf", SAMPLE)
    assert doc.status == INDEXED
    assert any("常见问题" in b.text for b in doc.blocks)


def test_plain_text_empty_and_binary_files(tmp_path):
    (tmp_path / "notes.txt").write_text("Plain notes about LanceDB.\n\nSecond paragraph.", "utf-8")
    (tmp_path / "empty.md").write_bytes(b"")
    (tmp_path / "image.md").write_bytes(bytes(range(256)) * 8)
    (tmp_path / "paper.html").write_bytes(b"%PDF-1.4\n" + bytes(200))
    docs = {Path(s.path).name: load_document(s) for s in discover(tmp_path).files}
    assert docs["notes.txt"].status == INDEXED
    assert [b.text for b in docs["notes.txt"].blocks] == [
        "Plain notes about LanceDB.",
        "Second paragraph.",
    ]
    assert docs["empty.md"].status == EMPTY
    assert docs["empty.md"].reason == Reason.EMPTY_FILE
    assert docs["image.md"].status == FAILED
    assert docs["image.md"].reason == Reason.NOT_A_TEXT_DOCUMENT
    assert docs["paper.html"].status == FAILED
    assert docs["paper.html"].reason == Reason.NOT_A_TEXT_DOCUMENT


@pytest.mark.parametrize(
    ("relative", "phrase"),
    [
        ("GB2312/cindychen.com.md", "原创"),
        ("Big5/_ude_1.md", "維基大典"),
        ("SHIFT_JIS/tamuyou.haun.org.md", "年賀状"),
        ("EUC-KR/_ude_euc1.md", "역사적 예수"),
        ("KOI8-R/newsru.com.md", "психически"),
        ("windows-1251-russian/aif.ru.health.md", "Здоровье"),
        ("UTF-16/bom-utf-16-be.md", "Ayn Rand"),
        ("UTF-32/bom-utf-32-be.md", "Ayn Rand"),
        ("UTF-16BE/nobom-utf16be.md", "07/19/2015"),
        ("UTF-16LE/nobom-utf16le.md", "07/19/2015"),
        ("UTF-32BE/nobom-utf32be.md", "07/19/2015"),
        ("UTF-32LE/nobom-utf32le.md", "07/19/2015"),
    ],
)
def test_legacy_encodings_decode_correctly(relative, phrase):
    data = shared_path("corpus", "nasty", "encodings", relative).read_bytes()
    text = decode_text(data)
    assert phrase in text
    assert "\x00" not in text and "\ufffd" not in text


@pytest.mark.model
def test_every_format_loads_with_the_network_blocked(small_corpus, tmp_path):
    """A fresh interpreter with sockets disabled (and pypandoc's download refused) loads every
    format and embeds text (OCR offline: tests/test_ocr.py)."""
    (small_corpus / "notes.txt").write_text("Offline plain text works.", "utf-8")
    for kind, make in {**MAKERS, **DOCUMENT_MAKERS}.items():
        (small_corpus / f"document.{kind}").write_bytes(make())
    script = textwrap.dedent(
        f"""
        import socket

        def refuse(*args, **kwargs):
            raise OSError("network access attempted in an offline test")

        socket.socket.connect = refuse
        socket.socket.connect_ex = refuse
        socket.create_connection = refuse
        socket.getaddrinfo = refuse
        import pypandoc, pypandoc.pandoc_download
        pypandoc.download_pandoc = pypandoc.pandoc_download.download_pandoc = refuse

        from tasks.embed.models import DEFAULT_MODEL, get_embedder
        from tasks.ingest.discover import discover
        from tasks.parse.document import load_document

        by_type = {{}}
        for source in discover({str(small_corpus)!r}).files:
            doc = load_document(source)
            assert doc.status == "indexed", (source.doc_id, doc.error)
            chars = sum(len(b.text) for b in doc.blocks)
            by_type[source.mime_type] = by_type.get(source.mime_type, 0) + chars
        print(sorted(by_type.items()))
        assert set(by_type) == set({sorted(TYPES.values())!r})
        assert all(chars > 0 for chars in by_type.values())
        embedder = get_embedder(DEFAULT_MODEL)
        vector = embedder.encode(["offline embedding", "离线嵌入"])  # the second also by e5
        info = embedder.info
        assert vector.shape == (2, info.dimension + info.routed_dimension) == (2, 897 + 384)
        assert vector[1, info.dimension :].any() and not vector[0, info.dimension :].any()
        print("OFFLINE-OK")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OFFLINE-OK" in result.stdout


def test_unstructured_gets_the_blank_sentence_pipeline_not_a_downloaded_model():
    import unstructured.nlp.tokenize as unstructured_tokenize

    from tasks.parse.unstructured_offline import install_unstructured_nlp

    install_unstructured_nlp()
    nlp = unstructured_tokenize._get_nlp()
    assert nlp.pipe_names == ["sentencizer"] and nlp.meta["name"] != "core_web_sm"
    sentences = unstructured_tokenize.sent_tokenize("Borrowing is checked. References are safe!")
    assert sentences == ["Borrowing is checked.", "References are safe!"]


def test_the_narrative_text_shortcut_gives_the_blocks_of_unstructureds_own_guess(monkeypatch):
    """The HTML parser's narrative-text guess is skipped (tasks/parse/unstructured_offline.py):
    every Markdown and HTML file of data/sample gives the same blocks with the guess back."""
    import unstructured.partition.html.parser as html_parser
    from unstructured.partition import text_type

    from tasks.parse.unstructured_offline import install_unstructured_nlp, narrative_or_not

    install_unstructured_nlp()
    assert html_parser.is_possible_narrative_text is narrative_or_not
    files = sorted(p for p in SAMPLE.rglob("*") if p.suffix in {".md", ".html"})
    assert len(files) >= 20
    fast = {p: _blocks_of(p) for p in files}
    monkeypatch.setattr(
        html_parser, "is_possible_narrative_text", text_type.is_possible_narrative_text
    )
    for path in files:
        assert _blocks_of(path) == fast[path], path


def _blocks_of(path: Path) -> list:
    from tasks.parse.readers.text import read_text

    return read_text(path.read_bytes(), "md" if path.suffix == ".md" else "html")


def test_parsers_get_every_core_beside_a_model_that_leaves_them_idle(monkeypatch):
    from tasks.core.cores import usable_cores
    from tasks.embed.models import model_info
    from tasks.parse.worker import WORKERS_ENV, ParserPool

    monkeypatch.delenv(WORKERS_ENV, raising=False)
    cores = usable_cores()
    assert not model_info("hash:8").busy_cores
    assert model_info("onnx-int8-token:all-MiniLM-L6-v2").busy_cores
    pool = ParserPool(model_busy_cores=False)
    assert len(pool.workers()) == cores, "the hash embedder leaves the cores to the parsers"
    monkeypatch.setenv(WORKERS_ENV, "3")
    assert len(pool.workers()) == cores, "made once: a later call changes nothing"
    monkeypatch.delenv(WORKERS_ENV)
    beside_a_model = ParserPool(model_busy_cores=True)
    assert len(beside_a_model.workers()) == max(1, cores // 2)
    monkeypatch.setenv(WORKERS_ENV, "3")
    configured = ParserPool(model_busy_cores=False)
    assert len(configured.workers()) == 3, "the environment variable wins"


def test_an_idle_parser_goes_to_the_earliest_batch_waiting_whoever_asked_first():
    """Batches load side by side; the first batch's files must not wait behind a later
    batch's (the model waits for the first batch)."""
    import threading
    import time

    from tasks.parse.worker import IdleWorkers

    idle = IdleWorkers()
    served: list[int] = []

    def wait_for_a_worker(priority: int) -> None:
        worker = idle.get(priority)
        served.append(priority)
        idle.put(worker)

    waiting = []
    for priority in (3, 2, 1):  # later batches ask first
        thread = threading.Thread(target=wait_for_a_worker, args=(priority,))
        thread.start()
        waiting.append(thread)
        deadline = time.monotonic() + 10
        while len(idle._waiting) < len(waiting) and time.monotonic() < deadline:
            time.sleep(0.01)
    assert len(idle._waiting) == 3, "all three wait: no worker is idle yet"
    idle.put(object())  # type: ignore[arg-type]  # one worker, handed on as each is done
    for thread in waiting:
        thread.join(timeout=10)
    assert served == [1, 2, 3]


def test_markdown_blocks_equal_those_of_unstructureds_partition_md():
    """The kept Markdown converter (tasks/parse/elements.py) gives the blocks partition_md
    gives, file after file: nothing of one file (a link reference, a footnote) leaks into
    the next. Every Markdown file of data/sample and ../shared/corpus/md, and edge cases."""
    from unstructured.partition.md import partition_md

    from tasks.parse.elements import NO_LANGUAGE_DETECTION, elements_to_blocks, text_blocks

    texts = ["", "   \n\t\n", "[ref]: https://example.org\n\nSee [it][ref].", "See [it][ref]."]
    texts += ["# T\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```rust\nfn main() {}\n```\n"]
    shared_md = SHARED / "corpus" / "md"  # where ../shared is present
    folders = [SAMPLE, *([shared_md] if shared_md.is_dir() else [])]
    files = sorted(p for folder in folders for p in folder.rglob("*.md"))
    assert len(files) >= 10
    texts += [p.read_text(encoding="utf-8", errors="replace") for p in files]
    for text in texts:
        expected = elements_to_blocks(partition_md(text=text, languages=NO_LANGUAGE_DETECTION))
        assert text_blocks(text, "md") == expected, text[:200]
    linked = text_blocks("See [it][ref].", "md")
    assert "https://example.org" not in str(linked) and linked[0].text == "See [it][ref]."


@pytest.mark.slow
def test_a_parser_process_starts_without_torch_and_can_still_read_pdfs():
    """spaCy's thinc would import torch (seconds of a parser's start) for layers the blank
    sentence splitter never uses; it is hidden while spaCy imports, so a parser process that
    only reads Markdown and HTML never loads it, and the PDF reader still imports it."""
    script = textwrap.dedent(
        f"""
        import sys
        from tasks.ingest.discover import discover
        from tasks.parse.document import load_document, warm_up
        from tasks.parse.unstructured_offline import check_pdf_support, sentence_pipeline

        warm_up()
        nlp = sentence_pipeline()
        sentences = [s.text for s in nlp("Borrowing is checked. References are safe!").sents]
        assert sentences == ["Borrowing is checked.", "References are safe!"], sentences
        files = [s for s in discover({str(SAMPLE)!r}).files if s.doc_id.endswith((".md", ".html"))]
        assert len(files) >= 10
        assert all(load_document(s).status == "indexed" for s in files[:10])
        assert "torch" not in sys.modules, "torch was imported"
        check_pdf_support()
        import torch
        print("ok", torch.__version__)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("ok")


@pytest.mark.slow
def test_a_damaged_pdf_leaves_no_stray_line_in_the_output(tmp_path, capfd):
    """A parser process shares the run's stderr: the PDF library's warnings about a damaged
    file (pypdf's "EOF marker not found") do not reach it; the ledger says what was wrong."""
    from tasks.parse.worker import ParseWorker

    (tmp_path / "x.pdf").write_bytes(b"%PDF-1.4 truncated: no objects, no trailer")
    worker = ParseWorker()
    try:
        doc = worker.load(discover(tmp_path).files[0], ReadOptions(), timeout=120)
    finally:
        worker._stop()  # no public stop: a pool keeps its workers for the process
    assert doc.reason == Reason.DAMAGED_PDF
    assert "EOF marker" not in capfd.readouterr().err
