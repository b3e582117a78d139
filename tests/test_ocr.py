"""Scanned pages: which pages get OCR, how they are rendered and put in reading order, and
OCR of English and Chinese scans through the real flow with the network blocked."""

from __future__ import annotations

import json
import time
from pathlib import Path

import lancedb
import pytest

from tasks.core.reasons import Reason, Status
from tasks.core.records import LedgerEntry
from tasks.dataset.schema import CHUNKS_TABLE, DOCUMENTS_TABLE
from tasks.ingest.discover import Scan, discover, plan_changes
from tasks.parse import ocr
from tasks.parse.document import ReadOptions, load_document
from tasks.parse.readers.pdf import PdfOptions

from .commands import run_module
from .conftest import shared_path
from .offline import offline_env
from .scans import CTEX_FAQ, R_FAQ, page_text, scanned_page, with_scan_between


def box(x0: float, y0: float, x1: float, y1: float, text: str, skew: float = 0.0) -> ocr.Box:
    corners = (
        (x0, y0 + skew * x0),
        (x1, y0 + skew * x1),
        (x1, y1 + skew * x1),
        (x0, y1 + skew * x0),
    )
    return ocr.Box(corners, text, 0.99)


def test_reading_order_goes_down_each_column_under_a_title():
    boxes = [
        box(300, 10, 700, 40, "Title across the page"),
        # the right column comes first in the engine's output, its lines level with the left's
        box(520, 100, 900, 120, "right one"),
        box(520, 130, 900, 150, "right two"),
        box(520, 160, 900, 180, "right three"),
        box(50, 100, 460, 120, "left one"),
        box(50, 130, 460, 150, "left two"),
        box(50, 160, 460, 180, "left three"),
        box(50, 260, 900, 280, "Footer line across"),
    ]
    assert ocr.reading_order(boxes) == [
        "Title across the page",
        "left one left two left three",
        "right one right two right three",
        "Footer line across",
    ]


def test_reading_order_joins_the_segments_of_a_skewed_line():
    boxes = [box(50, 100 + 30 * i, 700, 120 + 30 * i, f"line {i}", skew=0.05) for i in range(6)]
    boxes.append(box(720, 100, 900, 120, "tail", skew=0.05))  # the rest of line 0
    assert ocr.reading_order(boxes) == [
        " ".join(["line 0 tail"] + [f"line {i}" for i in range(1, 6)])
    ]


def test_chinese_segments_and_lines_join_without_spaces():
    boxes = [
        box(50, 10, 200, 40, "中文文本"),
        box(210, 10, 400, 40, "继续"),
        box(50, 45, 400, 75, "下一行"),
        box(410, 45, 500, 75, "and English"),
    ]
    assert ocr.reading_order(boxes) == ["中文文本继续下一行 and English"]


def test_render_scale_stays_within_the_caps():
    assert ocr.render_scale(612, 792) == pytest.approx(ocr.DPI / 72)  # letter at 200 dpi
    small = ocr.render_scale(120, 86)  # a business-card page holding a 2400 dpi scan
    assert 86 * small == pytest.approx(ocr.MIN_SIDE_PX, rel=0.01)
    for side in (2160, 14400):  # a 30-inch page; PDF's largest
        scale = ocr.render_scale(side, side)
        assert side * scale <= ocr.MAX_SIDE_PX and (side * scale) ** 2 <= ocr.MAX_PIXELS


def test_the_ocr_models_ship_inside_the_wheel():
    assert all(Path(path).is_file() for path in ocr.model_paths().values())


def _pdf(tmp_path: Path, name: str, data: bytes):
    (tmp_path / name).write_bytes(data)
    return next(s for s in discover(tmp_path).files if s.doc_id == name)


def test_only_pages_without_text_need_ocr():
    import pypdfium2 as pdfium

    mixed = with_scan_between(R_FAQ, 10, scanned_page(R_FAQ, 8, dpi=72), 11)
    pdf = pdfium.PdfDocument(mixed)
    try:
        assert [ocr.needs_ocr(pdf[i]) for i in range(3)] == [False, True, False]
    finally:
        pdf.close()
    blank = pdfium.PdfDocument.new()
    blank.new_page(612, 792)
    assert not ocr.needs_ocr(blank[0])
    blank.close()


def test_with_ocr_off_a_scan_ends_ocr_off_and_a_mixed_pdf_keeps_its_text_pages(tmp_path):
    off = ReadOptions({"pdf": PdfOptions(ocr="off")})
    scan = load_document(_pdf(tmp_path, "scan.pdf", scanned_page(R_FAQ, 8, dpi=72)), off)
    assert (scan.status, scan.reason) == (Status.EMPTY, Reason.OCR_OFF)
    mixed_pdf = with_scan_between(R_FAQ, 10, scanned_page(R_FAQ, 8, dpi=72), 11)
    mixed = load_document(_pdf(tmp_path, "mixed.pdf", mixed_pdf), off)
    assert mixed.status == Status.INDEXED and mixed.ocr_pages == ()
    assert {b.page_number for b in mixed.blocks} == {1, 3}


def test_ocr_past_its_time_budget_indexes_the_text_pages_and_names_the_rest(tmp_path):
    mixed = with_scan_between(R_FAQ, 10, scanned_page(R_FAQ, 8, dpi=72), 11)
    result = ocr.ocr_pdf(mixed, skip={1, 3}, deadline=time.monotonic() - 1)
    assert (result.pages, result.skipped) == ((), (2,))
    budget = ReadOptions({"pdf": PdfOptions(ocr="auto", ocr_budget=1e-9)})
    doc = load_document(_pdf(tmp_path, "mixed.pdf", mixed), budget)
    assert doc.status == Status.INDEXED and doc.ocr_pages == ()
    assert doc.message.endswith("pages not read: 2")


def test_a_run_with_ocr_on_retries_files_left_empty_by_ocr_off():
    scanned = Scan((_source("scan.pdf"), _source("blank.pdf")))
    ledger = {
        "scan.pdf": LedgerEntry("h", Status.EMPTY, "fp", reason=Reason.OCR_OFF),
        "blank.pdf": LedgerEntry("h", Status.EMPTY, "fp", reason=Reason.NO_TEXT),
    }
    assert [s.doc_id for s in plan_changes(scanned, ledger, "fp").to_index] == []
    retried = plan_changes(scanned, ledger, "fp", frozenset({Reason.OCR_OFF}))
    assert [s.doc_id for s in retried.to_index] == ["scan.pdf"]


def _source(doc_id: str):
    from tasks.core.records import SourceFile

    return SourceFile(doc_id, f"/c/{doc_id}", 1, 0, "h", "application/pdf")


def test_the_corpus_scans_need_ocr_and_a_huge_page_renders_within_the_caps():
    import pypdfium2 as pdfium

    folder = shared_path("corpus", "nasty", "pdf")
    for name in ("scanned_no_text_layer/ccitt.pdf", "huge_page_or_image/enormous.pdf"):
        pdf = pdfium.PdfDocument(str(folder / name))
        try:
            assert ocr.needs_ocr(pdf[0]), name
            if name.startswith("huge"):
                image = ocr.render_page(pdf[0])
                height, width = image.shape[:2]
                assert max(height, width) <= ocr.MAX_SIDE_PX
                assert height * width <= ocr.MAX_PIXELS
        finally:
            pdf.close()


# -- through the real flow, offline -----------------------------------------------------------

EN_SENTENCE = (
    "New features are typically introduced in r-devel, while r-patched is for bug fixes mostly."
)
ZH_SENTENCE = "美国数学学会 (AMS) 鼓励数学家们使用 TEX 系统向它的期刊投稿。"


def table(uri: str, name: str) -> list[dict]:
    return lancedb.connect(uri).open_table(name).to_arrow().to_pylist()


@pytest.mark.integration
@pytest.mark.model
def test_scanned_english_and_chinese_pages_are_read_by_ocr_offline(subprocess_env, tmp_path):
    """The ingest and query commands with sockets refused (loopback aside) in every Python
    process: a run with --ocr off leaves a scan `ocr_off`; the next run (OCR on by default)
    reads it and two PDFs whose page 2 is a scan (English, Chinese); a sentence read off each
    scanned page finds that page first."""
    assert EN_SENTENCE in " ".join(page_text(R_FAQ, 8).split())
    assert ZH_SENTENCE in page_text(CTEX_FAQ, 6).replace("\r\n", "")
    env, attempts = offline_env(subprocess_env, tmp_path / "guard")
    corpus, uri = tmp_path / "corpus", str(tmp_path / "index")
    corpus.mkdir()
    (corpus / "scan.pdf").write_bytes(scanned_page(R_FAQ, 7, top=0.3))
    ingest = [str(corpus), "--index", uri]

    off = run_module("flows.ingest", *ingest, "--ocr", "off", env=env)
    assert off.returncode == 0, off.stderr[-3000:]
    assert [(r["status"], r["reason"]) for r in table(uri, DOCUMENTS_TABLE)] == [
        ("empty", "ocr_off")
    ]

    (corpus / "en.pdf").write_bytes(with_scan_between(R_FAQ, 10, scanned_page(R_FAQ, 8), 11))
    (corpus / "zh.pdf").write_bytes(with_scan_between(CTEX_FAQ, 5, scanned_page(CTEX_FAQ, 6), 7))
    auto = run_module("flows.ingest", *ingest, env=env)
    assert auto.returncode == 0, auto.stderr[-3000:]
    assert "ocr: 3 pages read" in auto.stdout, auto.stdout
    ledger = {r["doc_id"]: r for r in table(uri, DOCUMENTS_TABLE)}
    assert {d: (r["status"], r["ocr_pages"]) for d, r in ledger.items()} == {
        "scan.pdf": ("indexed", [1]),
        "en.pdf": ("indexed", [2]),
        "zh.pdf": ("indexed", [2]),
    }
    chunks = table(uri, CHUNKS_TABLE)
    assert all(r["ocr"] == (r["page_number"] in ledger[r["doc_id"]]["ocr_pages"]) for r in chunks)
    scan_text = " ".join(r["text"] for r in chunks if r["doc_id"] == "scan.pdf")
    assert "R is a system for statistical computation and graphics" in scan_text

    for sentence, doc_id in ((EN_SENTENCE, "en.pdf"), (ZH_SENTENCE, "zh.pdf")):
        found = run_module("flows.query", sentence, "--index", uri, "-k", "3", "--json", env=env)
        assert found.returncode == 0, found.stderr[-3000:]
        first = json.loads(found.stdout)[0]
        assert (first["doc_id"], first["page_number"]) == (doc_id, 2), first
    assert attempts.read_text("utf-8") == "", "a process tried to reach the network"
