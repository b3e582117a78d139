"""An ingest run's artifacts as a person sees them: the Prefect UI in a real headless Chromium.

Starts `prefect server start` with its UI, runs `python -m flows.ingest` against it on a small
real corpus with one broken PDF, then opens the flow run's Artifacts tab and the summary and
failures artifacts, and checks that the rendered tables say what the command printed.
Screenshots are written to tests/output/ui/.
"""

from __future__ import annotations

import re
import shutil

import pytest

from .commands import run_module
from .conftest import ROOT, build_small_corpus
from .servers import prefect_server

pytestmark = pytest.mark.integration

SCREENSHOTS = ROOT / "tests" / "output" / "ui"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # Without these Chromium keeps calling home, which floods a closed network.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
UI_TIMEOUT_MS = 120_000  # the UI is a JavaScript app and this machine can be slow
PRINTED_FILES = re.compile(
    r"files: (?P<seen>\d+) seen, (?P<indexed>\d+) indexed, (?P<unchanged>\d+) unchanged, "
    r"(?P<empty>\d+) empty, (?P<failed>\d+) failed, (?P<removed>\d+) removed"
)
PRINTED_CHUNKS = re.compile(
    r"chunks: (?P<written>\d+) written \((?P<embedded>\d+) embedded, (?P<cached>\d+) cached, "
    r"(?P<reused>\d+) reused, (?P<deleted>\d+) deleted\)"
)
PRINTED_INDEX = re.compile(r"chunks table version (?P<version>\d+), tag (?P<tag>run-\w+)")


def chromium() -> str:
    """Debian's Chromium, or skip: the test never downloads a browser."""
    pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    path = shutil.which("chromium")
    if path is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium)")
    return path


def printed_counts(stdout: str) -> dict[str, str]:
    """The numbers the command line printed, named like the rows of the summary table."""
    files, chunks, index = (
        pattern.search(stdout) for pattern in (PRINTED_FILES, PRINTED_CHUNKS, PRINTED_INDEX)
    )
    assert files and chunks and index, stdout
    return {
        **{f"files {name}": value for name, value in files.groupdict().items()},
        **{f"chunks {name}": value for name, value in chunks.groupdict().items()},
        "dataset tag": index["tag"],
        "chunks table version": index["version"],
    }


def rendered_table(page) -> list[list[str]]:
    """The cell texts of the artifact table on the page, row by row."""
    rows = page.locator("table tbody tr")
    return [row.locator("td").all_inner_texts() for row in rows.all()]


def screenshot(page, name: str) -> None:
    """Save the whole page as tests/output/ui/<name>.png, with transitions finished."""
    page.screenshot(path=SCREENSHOTS / f"{name}.png", full_page=True, animations="disabled")


def test_the_ui_shows_the_ingest_runs_summary_and_failures(tmp_path):
    from playwright.sync_api import expect, sync_playwright

    executable = chromium()
    corpus = build_small_corpus(tmp_path / "corpus")
    (corpus / "broken.pdf").write_bytes(b"not a pdf")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with prefect_server(tmp_path, ui=True) as server:
        cli = run_module(
            "flows.ingest",
            str(corpus),
            "--index",
            str(tmp_path / "idx"),
            "--model",
            "hash",
            env=server.env,
        )
        assert cli.returncode == 2, cli.stdout + cli.stderr  # broken.pdf failed
        assert "━" not in cli.stderr, "no progress bar without a terminal"
        printed = printed_counts(cli.stdout)
        assert (printed["files seen"], printed["files failed"]) == ("6", "1")
        (run,) = server.http.post("/flow_runs/filter", json={}).json()

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1700})
                page.set_default_timeout(UI_TIMEOUT_MS)
                expect.set_options(timeout=UI_TIMEOUT_MS)

                page.goto(f"{server.url}/runs/flow-run/{run['id']}")
                expect(page.get_by_text(run["name"]).first).to_be_visible()
                page.locator(".p-tab", has_text="Artifacts").click()
                cards = page.locator(".artifact-card")
                for key in ("ingest-summary", "ingest-failures", "ingest-progress"):
                    expect(cards.filter(has_text=key)).to_be_visible()
                expect(cards.filter(has_text="ingest-progress")).to_contain_text(
                    f"6 of 6 files to index done, {printed['chunks written']} chunks written."
                )
                screenshot(page, "ingest-run")

                cards.filter(has_text="ingest-summary").click()
                expect(page.locator("table")).to_contain_text("chunks table version")
                summary = dict(rendered_table(page))
                assert {name: summary[name] for name in printed} == printed
                expect(
                    page.get_by_text("1 file(s) failed.", exact=True)
                ).to_be_visible()  # description
                screenshot(page, "ingest-summary")

                page.go_back()
                page.locator(".p-tab", has_text="Artifacts").click()
                cards.filter(has_text="ingest-failures").click()
                expect(page.locator("table")).to_contain_text("broken.pdf")
                assert rendered_table(page) == [
                    ["broken.pdf", "not_a_pdf", "file has a .pdf name but no PDF header"]
                ]
                screenshot(page, "ingest-failures")
            finally:
                browser.close()
