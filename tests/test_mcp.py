"""The MCP server (flows/mcp_server.py) on stdio, as a desktop agent runs it: the mcp SDK's
own client spawns `python -m flows.mcp` over a dataset built by the real ingest flow, lists
the tools and the prompt, calls each, and gets the hits `python -m flows.query --json` prints;
bad arguments are tool errors that say what was wrong. The same server over Streamable HTTP
at /mcp of `--serve`: tests/test_search_page.py (the hits of the command line, on its
ingest-built dataset) and tests/test_service_token.py (each tool, behind the token)."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from .commands import run_module
from .conftest import ROOT
from .test_cli_imports import no_prefect_api

pytestmark = pytest.mark.integration

CALL_TIMEOUT = 60  # seconds for one client session, start to end
TOOL_TIMEOUT = 2.0  # the search time limit of the test of the tools' time limit


def paragraph(topic: str, sentences: int) -> str:
    return " ".join(
        f"Sentence {i} on {topic} says how {topic} behave in practice." for i in range(sentences)
    )


@pytest.fixture(scope="module")
def dataset(subprocess_env, tmp_path_factory) -> str:
    """A small corpus through `python -m flows.ingest --model hash:384`: a long Markdown
    document (several chunks, three sections), two short ones and a broken PDF (failed)."""
    root = tmp_path_factory.mktemp("mcp")
    corpus = root / "corpus"
    corpus.mkdir()
    (corpus / "rust.md").write_text(
        "# Ownership\n\n"
        + paragraph("owned values", 12)
        + "\n\n## Borrowing\n\n"
        + paragraph("borrowed references", 12)
        + "\n\n## Lifetimes\n\n"
        + paragraph("reference lifetimes", 12)
        + "\n",
        "utf-8",
    )
    (corpus / "bread.md").write_text(
        "# Baking\n\nBake the sourdough bread at 230 degrees for forty minutes.\n", "utf-8"
    )
    (corpus / "stars.md").write_text(
        "# Neutron stars\n\nA neutron star is the collapsed core of a massive star.\n", "utf-8"
    )
    (corpus / "broken.pdf").write_text("not a PDF at all", "utf-8")
    uri = str(root / "index")
    result = run_module(
        "flows.ingest", str(corpus), "--index", uri, "--model", "hash:384", env=subprocess_env
    )
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]  # 1 failed
    assert "not_a_pdf" in result.stdout
    return uri


def session(uri: str, work: Path, script) -> Any:
    """Run `script(client)` in a session with `python -m flows.mcp --index URI` over stdio."""
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "flows.mcp", "--index", uri],
        cwd=ROOT,
        env=no_prefect_api(str(work / "prefect")),
    )

    async def run() -> Any:
        async with Client(server) as client:
            return await script(client)

    return asyncio.run(asyncio.wait_for(run(), CALL_TIMEOUT))


def cli_hits(uri: str, work: Path, *options: str) -> list[dict[str, Any]]:
    result = run_module(
        "flows.query",
        *options,
        "--index",
        uri,
        "--json",
        "--no-service",
        env=no_prefect_api(str(work / "prefect")),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


SEARCHES = [
    ({"text": "how do lifetimes behave", "k": 4}, ["how do lifetimes behave", "-k", "4"]),
    (
        {"text": "sourdough", "mode": "fts", "k": 3, "context": 1},
        ["sourdough", "--mode", "fts", "-k", "3", "--context", "1"],
    ),
    (
        {"text": "owned values", "mode": "vector", "source": "rust*", "expand": "section"},
        ["owned values", "--mode", "vector", "--source", "rust*", "--expand", "section"],
    ),
]  # fmt: skip


def test_tools_have_schemas_and_search_gives_the_hits_of_the_command_line(dataset, tmp_path):
    async def script(client: Client) -> Any:
        listed = await client.list_tools()
        results = [await client.call_tool("search", arguments) for arguments, _ in SEARCHES]
        return listed.tools, results

    tools, results = session(dataset, tmp_path, script)
    by_name = {tool.name: tool for tool in tools}
    assert set(by_name) == {"search", "read", "sources", "stats"}
    search_schema = by_name["search"].input_schema["properties"]
    filters = {"text", "k", "mode", "source", "type", "section", "since", "until", "author"}
    assert filters | {"lang", "meta", "context", "expand"} <= set(search_schema)
    assert search_schema["k"]["minimum"] == 1 and "flag" not in search_schema["k"]
    assert {"chunk_id", "doc_id", "char_start", "char_end", "max_chars"} == set(
        by_name["read"].input_schema["properties"]
    )
    assert all(tool.output_schema and tool.description for tool in tools)
    hit_schema = by_name["search"].output_schema
    assert {"mode", "hits"} <= set(hit_schema["properties"])

    for (arguments, options), result in zip(SEARCHES, results, strict=True):
        assert not result.is_error, result.content
        mine = result.structured_content["hits"]
        theirs = cli_hits(dataset, tmp_path, *options)
        assert mine, arguments
        assert [h["chunk_id"] for h in mine] == [h["chunk_id"] for h in theirs], arguments
        for ours, cli in zip(mine, theirs, strict=True):
            assert abs(ours["score"] - cli["score"]) <= 1e-6
            assert {**ours, "score": 0} == {**cli, "score": 0}  # every other field, context too
        assert json.loads(result.content[0].text) == result.structured_content
    assert results[0].structured_content["mode"] == "hybrid"
    assert results[1].structured_content["hits"][0]["doc_id"] == "bread.md"


def test_read_sources_stats_and_the_prompt(dataset, tmp_path):
    async def script(client: Client) -> Any:
        found = await client.call_tool("search", {"text": "reference lifetimes", "k": 1})
        hit = found.structured_content["hits"][0]
        around = await client.call_tool("read", {"chunk_id": hit["chunk_id"], "max_chars": 400})
        whole = await client.call_tool(
            "read", {"doc_id": "rust.md", "char_start": 0, "max_chars": 20_000}
        )
        read_on = around.structured_content["char_end"]  # where the first read stopped
        on = await client.call_tool(
            "read", {"doc_id": "rust.md", "char_start": read_on, "char_end": 10**6}
        )
        failed = await client.call_tool("sources", {"status": "failed"})
        page = await client.call_tool("sources", {"offset": 1, "limit": 2})
        stats = await client.call_tool("stats", {})
        prompts = await client.list_prompts()
        prompt = await client.get_prompt(
            "answer_with_sources", {"question": "how hot is the oven for bread?", "k": "2"}
        )
        return hit, around, whole, on, failed, page, stats, prompts, prompt

    hit, around, whole, on, failed, page, stats, prompts, prompt = session(
        dataset, tmp_path, script
    )
    for result in (around, whole, on, failed, page, stats):
        assert not result.is_error, result.content
    passage = around.structured_content
    assert passage["doc_id"] == hit["doc_id"] == "rust.md"
    assert len(passage["text"]) <= 400 and passage["char_end"] - passage["char_start"] <= 400
    assert passage["char_start"] == hit["char_start"]  # a chunk longer than 400: its start
    assert hit["chunk_id"] in [chunk["chunk_id"] for chunk in passage["chunks"]]
    assert hit["text"].startswith(passage["text"])
    document = whole.structured_content
    assert document["char_start"] == 0 and document["char_end"] == document["document_end"]
    assert {chunk["section"] for chunk in document["chunks"]} >= {"Ownership > Lifetimes"}
    assert hit["text"] in document["text"]  # the whole document holds every chunk's text
    rest = on.structured_content
    assert rest["char_start"] == passage["char_end"]
    assert rest["char_end"] == document["document_end"]
    assert (
        document["text"].endswith(rest["text"])
        and (passage["text"] + rest["text"]) in document["text"]
    )

    listed = failed.structured_content
    assert listed["total"] == 1
    [broken] = listed["documents"]
    assert (broken["doc_id"], broken["status"], broken["reason"]) == (
        "broken.pdf",
        "failed",
        "not_a_pdf",
    )
    assert page.structured_content["total"] == 4  # by doc_id: bread, broken, rust, stars
    assert [d["doc_id"] for d in page.structured_content["documents"]] == ["broken.pdf", "rust.md"]

    described = stats.structured_content
    assert described["documents_by_status"] == {"failed": 1, "indexed": 3}
    assert described["last_run"] == list(described["run_tags"])[-1]
    assert described["last_run"].startswith("run-")
    assert described["failed"] == [
        {
            "doc_id": "broken.pdf",
            "reason": "not_a_pdf",
            "error": "file has a .pdf name but no PDF header",
        }
    ]

    assert [p.name for p in prompts.prompts] == ["answer_with_sources"]
    text = prompt.messages[0].content.text
    assert "Question: how hot is the oven for bread?" in text
    assert "1. > " in text and "— bread.md, Baking" in text
    assert "230 degrees" in text


BAD_CALLS = [
    ("search", {"text": "x", "k": 0}, "k: Input should be greater than or equal to 1"),
    ("search", {"text": "x", "k": 101}, "k: at most 100 hits on this service"),
    ("search", {"text": "x" * 2001}, "text: at most 2000 characters on this service"),
    ("search", {"text": "x", "rerank_depth": 201}, "rerank_depth: at most 200 candidates"),
    ("search", {"text": "x", "colour": "red"}, "colour: not an argument of this tool"),
    ("search", {"k": 3}, "text: Field required"),
    ("search", {"text": "x", "k": "5"}, "k: Input should be a valid integer"),
    ("search", {"text": "x", "since": "last tuesday"}, "since: not a date, date-time or age"),
    ("search", {"text": "x", "context": 1, "expand": "section"}, "context and expand cannot"),
    ("search", {"text": "x", "rerank": True}, "started without --rerank"),
    ("read", {"chunk_id": "no-such-chunk"}, "no chunk with this chunk_id"),
    ("read", {"doc_id": "nothing.md", "char_start": 0}, "no document with this doc_id"),
    ("read", {"doc_id": "rust.md"}, "give char_start with doc_id"),
    ("read", {"doc_id": "rust.md", "char_start": 10**7}, "no text there: it ends at character"),
    ("read", {"chunk_id": "x", "max_chars": 10**6}, "max_chars: Input should be less than"),
    ("sources", {"status": "lost"}, "status: Input should be 'indexed', 'empty' or 'failed'"),
    ("stats", {"verbose": True}, "verbose: not an argument of this tool"),
    ("grep", {}, "no tool named 'grep'"),
]


def test_bad_arguments_are_tool_errors_that_say_what_was_wrong(dataset, tmp_path):
    async def script(client: Client) -> Any:
        return [await client.call_tool(name, arguments) for name, arguments, _ in BAD_CALLS]

    results = session(dataset, tmp_path, script)
    for (name, arguments, expected), result in zip(BAD_CALLS, results, strict=True):
        assert result.is_error, (name, arguments)
        message = result.content[0].text
        assert expected in message, (name, arguments, message)
        assert "Traceback" not in message and str(tmp_path.parent) not in message
        assert dataset not in message


def test_every_tool_runs_within_the_time_limit_of_a_search(dataset, monkeypatch):
    """read, sources and stats run on the service's search threads within its time limit, as
    search does: past it a tool error that says so, and the next call is answered (the
    SDK's client, in process, on the server flows/service.py builds)."""
    from flows import mcp_server as tools
    from flows.service import Searches, ServiceSettings, mcp_server
    from tasks.dataset.dataset import Dataset
    from tasks.search.searcher import Searcher

    release = threading.Event()
    real_stats = tools.stats

    def held(searcher: Searcher) -> dict[str, Any]:  # the real stats, once the test says
        release.wait(CALL_TIMEOUT)
        return real_stats(searcher)

    searcher = Searcher(Dataset(dataset))
    real_stats(searcher)  # tables opened: the answered call below is well within the limit
    monkeypatch.setattr(tools, "stats", held)
    searches = Searches(searcher, ServiceSettings(search_timeout=TOOL_TIMEOUT))

    async def script() -> Any:
        async with Client(mcp_server(searches)) as client:
            late = await client.call_tool("stats", {})
            release.set()
            return late, await client.call_tool("stats", {})

    try:
        late, answered = asyncio.run(asyncio.wait_for(script(), CALL_TIMEOUT))
    finally:
        release.set()
        searches.close()
    assert late.is_error
    assert late.content[0].text == (
        f"the tool stats took longer than {TOOL_TIMEOUT:g} s; try again later"
    )
    assert not answered.is_error, answered.content
    assert answered.structured_content["documents_by_status"] == {"failed": 1, "indexed": 3}
