"""The search page for people (flows/search_page.py) at / of `python -m flows.query --serve`.

A small corpus (English Markdown, a Chinese HTML page, a text note holding markup, two pages
of a PDF and a broken PDF) goes through `python -m flows.ingest --model hash:384`; the
hash embedder knows no meaning, so the questions go in fts mode. Plain HTTP tests check the
rendered hits, escaping and the token's login form; a real headless Chromium (Debian's, as
tests/test_ui.py drives it; skipped without it) searches in English and Chinese, filters,
opens a hit's context and the dataset page. Screenshots: tests/output/search_page/.
"""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from flows.search_page import COOKIE, page_cookie

from .commands import run_module
from .conftest import ROOT, SAMPLE
from .test_mcp import cli_hits
from .test_service import running_service
from .test_ui import CHROMIUM_ARGS, chromium

pytestmark = pytest.mark.integration

SCREENSHOTS = ROOT / "tests" / "output" / "search_page"
TOKEN = "page-token-for-the-tests-0123456789"
TIMEOUT_MS = 30_000
ENGLISH = "who owns a value"  # the Rust book's ownership chapter
CHINESE = "计算机关机时间的计划任务"  # the Debian handbook's anacron section (in Chinese)
NOTE = "A note about the ownership of tags: <script>alert('page')</script> shows as text.\n"


@pytest.fixture(scope="module")
def dataset(subprocess_env, tmp_path_factory) -> tuple[Path, str]:
    from pypdf import PdfReader, PdfWriter

    root = tmp_path_factory.mktemp("search-page")
    corpus = root / "corpus"
    for source, target in (
        ("rust-book/ch04-01-what-is-ownership.md", "rust/ownership.md"),
        ("debian-handbook-zh-cn/sect.asynchronous-task-scheduling-anacron.html", "zh/anacron.html"),
    ):
        (corpus / target).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SAMPLE / source, corpus / target)
    (corpus / "notes").mkdir()
    (corpus / "notes" / "escaping.txt").write_text(NOTE, "utf-8")
    writer = PdfWriter()
    for page in PdfReader(SAMPLE / "r-manuals" / "R-FAQ.pdf").pages[4:6]:
        writer.add_page(page)
    with open(corpus / "r-faq.pdf", "wb") as handle:
        writer.write(handle)
    (corpus / "broken.pdf").write_text("not a PDF at all", "utf-8")
    uri = str(root / "index")
    result = run_module(
        "flows.ingest", str(corpus), "--index", uri, "--model", "hash:384", env=subprocess_env
    )
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]  # 1 failed
    return corpus, uri


@pytest.fixture(scope="module")
def service(dataset, tmp_path_factory):
    with running_service(dataset[1], tmp_path_factory.mktemp("page-service")) as running:
        yield running


@pytest.fixture(scope="module")
def guarded(dataset, tmp_path_factory):
    root = tmp_path_factory.mktemp("page-token")
    (root / "token").write_text(TOKEN, "utf-8")
    with running_service(dataset[1], root, "--token-file", str(root / "token")) as running:
        yield running


def page(base: str, question: str, **options: str) -> httpx.Response:
    return httpx.get(f"{base}/", params={"q": question, **options}, timeout=30)


def hits_of(html: str) -> list[str]:
    """The doc_ids of the hits on a rendered page, in order."""
    return re.findall(r'<code class="doc-id">([^<]*)</code>', html)


def test_the_page_renders_hits_with_marks_and_escapes_document_text(service, dataset):
    corpus, _ = dataset
    empty = httpx.get(f"{service.base}/")
    assert empty.status_code == 200 and 'name="q"' in empty.text
    assert 'name="type"' in empty.text and '<option value="pdf"' in empty.text  # the model's
    assert 'name="k" type="number" value="5"' in empty.text and 'max="1000"' in empty.text

    answer = page(service.base, "ownership of tags", mode="fts")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/html")
    assert hits_of(answer.text)[0] == "notes/escaping.txt"
    # The note's markup is text; the question's words (stemmed: "tags" for "tag") marked.
    assert "<script>alert" not in answer.text
    assert "&lt;script&gt;alert(&#39;page&#39;)&lt;/script&gt;" in answer.text
    assert "<mark>ownership</mark>" in answer.text and "<mark>tags</mark>" in answer.text
    folder = (corpus / "notes").resolve().as_uri()
    assert f'href="{folder}"' in answer.text

    # The same search POST /search answers (one search path), in the same order.
    posted = httpx.post(
        f"{service.base}/search", json={"text": "ownership of tags", "mode": "fts"}
    ).json()
    assert hits_of(answer.text) == [hit["doc_id"] for hit in posted]


def test_the_mcp_server_at_mcp_gives_the_hits_of_the_command_line(service, tmp_path):
    """The service's MCP server over Streamable HTTP, through the SDK's client: its tools,
    and a search's hits as `flows.query --json` prints them (tests/test_mcp.py: on stdio)."""
    arguments = {"text": ENGLISH, "mode": "fts", "k": 3}

    async def script() -> Any:
        async with httpx2.AsyncClient(timeout=30) as http:
            transport = streamable_http_client(f"{service.base}/mcp", http_client=http)
            async with Client(transport) as client:
                return (await client.list_tools()).tools, await client.call_tool(
                    "search", arguments
                )

    tools, result = asyncio.run(asyncio.wait_for(script(), 60))
    assert {tool.name for tool in tools} == {"search", "read", "sources", "stats"}
    assert not result.is_error, result.content
    mine = result.structured_content["hits"]
    theirs = cli_hits(service.uri, tmp_path, ENGLISH, "--mode", "fts", "-k", "3")
    assert mine[0]["doc_id"] == "rust/ownership.md"
    assert [h["chunk_id"] for h in mine] == [h["chunk_id"] for h in theirs]
    for ours, cli in zip(mine, theirs, strict=True):
        assert abs(ours["score"] - cli["score"]) <= 1e-6
        assert {**ours, "score": 0} == {**cli, "score": 0}


def test_a_question_in_the_page_is_escaped_and_limits_are_the_services(service):
    question = "<img src=x onerror=alert(1)>"
    answer = page(service.base, question, mode="fts")
    assert "<img src=x" not in answer.text and "&lt;img src=x onerror=alert(1)&gt;" in answer.text
    refused = page(service.base, "ownership", k="5000")
    assert refused.status_code == 422 and "k:" in refused.text  # SearchOptions' bound
    too_many = page(service.base, "ownership", k="101")  # the service's --max-k (100)
    assert too_many.status_code == 422 and "at most 100 hits" in too_many.text


def test_context_and_dataset_pages(service):
    posted = httpx.post(f"{service.base}/search", json={"text": CHINESE, "mode": "fts"}).json()
    assert posted[0]["doc_id"] == "zh/anacron.html"
    context = httpx.get(
        f"{service.base}/context", params={"chunk_id": posted[0]["chunk_id"], "q": CHINESE}
    )
    assert context.status_code == 200 and "<mark>计划</mark>" in context.text
    missing = httpx.get(f"{service.base}/context", params={"chunk_id": "nope"})
    assert missing.status_code == 404
    dataset = httpx.get(f"{service.base}/dataset")
    assert dataset.status_code == 200
    assert "broken.pdf" in dataset.text and "not_a_pdf" in dataset.text


def test_with_a_token_the_page_needs_the_login_forms_cookie(guarded):
    base = guarded.base
    refused = httpx.get(f"{base}/", params={"q": "ownership"})
    assert refused.status_code == 401 and 'name="token"' in refused.text
    assert "ownership.md" not in refused.text
    for path in ("/dataset", "/context?chunk_id=x"):
        assert httpx.get(f"{base}{path}").status_code == 401
    assert httpx.get(f"{base}/health").status_code == 200

    wrong = httpx.post(f"{base}/login", data={"token": "wrong-token-of-the-same-size-01234"})
    assert wrong.status_code == 401 and COOKIE not in wrong.headers.get("set-cookie", "")
    forged = httpx.get(f"{base}/", cookies={COOKIE: page_cookie("another-token-0123456789")})
    assert forged.status_code == 401

    signed_in = httpx.post(f"{base}/login", data={"token": TOKEN})
    assert signed_in.status_code == 303 and signed_in.headers["location"] == "/"
    cookie = signed_in.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}={page_cookie(TOKEN)};") and TOKEN not in cookie
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    with httpx.Client(base_url=base, cookies=signed_in.cookies, timeout=30) as browser:
        answer = browser.get("/", params={"q": "ownership", "mode": "fts"})
        assert answer.status_code == 200 and "rust/ownership.md" in answer.text
        assert browser.get("/dataset").status_code == 200
        # The cookie is the page's: the JSON API still needs the bearer header.
        assert browser.post("/search", json={"text": "ownership"}).status_code == 401
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.get(f"{base}/", params={"q": "ownership"}, headers=bearer).status_code == 200


def test_a_person_searches_filters_and_reads_on_in_chromium(service):
    from playwright.sync_api import expect, sync_playwright

    executable = chromium()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            tab = browser.new_page(viewport={"width": 1200, "height": 1400})
            tab.set_default_timeout(TIMEOUT_MS)
            expect.set_options(timeout=TIMEOUT_MS)
            tab.goto(f"{service.base}/")
            hits = tab.locator("li.hit")

            # English: typed, fts chosen in the form, submitted with Enter.
            tab.get_by_label("question").fill(ENGLISH)
            tab.locator("select[name=mode]").select_option("fts")
            tab.get_by_label("question").press("Enter")
            expect(hits.first.locator(".doc-id")).to_have_text("rust/ownership.md")
            expect(hits.first.locator("mark").first).to_be_visible()
            tab.screenshot(path=SCREENSHOTS / "english.png", full_page=True)

            # A filter: the same question, text notes only.
            tab.locator("input[name=q]").fill("ownership")
            tab.locator("select[name=type]").select_option("txt")
            tab.get_by_role("button", name="Search").click()
            expect(hits).to_have_count(1)
            expect(hits.first.locator(".doc-id")).to_have_text("notes/escaping.txt")
            expect(hits.first.locator(".excerpt")).to_contain_text("<script>alert('page')")
            tab.screenshot(path=SCREENSHOTS / "filtered.png", full_page=True)

            # Chinese, and the text around the first hit, fetched when opened.
            tab.goto(f"{service.base}/?mode=fts&q={quote(CHINESE)}")
            first = hits.first
            expect(first.locator(".doc-id")).to_have_text("zh/anacron.html")
            expect(first.locator(".excerpt mark").first).to_be_visible()
            assert (first.get_attribute("lang") or "").startswith("zh")
            first.locator("summary", has_text="Text around this hit").click()
            passage = first.locator(".passage")
            expect(passage).to_contain_text("anacron")
            expect(passage.locator("mark").first).to_be_visible()
            tab.screenshot(path=SCREENSHOTS / "chinese-context.png", full_page=True)

            # The dataset page, through the navigation.
            tab.get_by_role("link", name="Dataset").click()
            expect(tab.locator("table.failed")).to_contain_text("broken.pdf")
            expect(tab.locator("table.stats")).to_contain_text("documents")
            tab.screenshot(path=SCREENSHOTS / "dataset.png", full_page=True)
        finally:
            browser.close()
    assert all((SCREENSHOTS / f"{n}.png").stat().st_size > 0 for n in ("english", "dataset"))
