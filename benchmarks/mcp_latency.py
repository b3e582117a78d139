"""An MCP `search` call's latency beside `POST /search`'s, on one running service.

    .venv/bin/python -m benchmarks.mcp_latency [--rows 10000] [--queries 50] [--smoke]

The dataset is benchmarks/query.py's (its rows, written and finalized as an ingest does,
the default model's vectors, XQuAD questions in English and Chinese in turn; `--smoke`: its
data/sample passages and questions, 400 rows, no ../shared). One `python -m flows.query
--serve` (no rate limit: the questions come as fast as it answers) is asked each question
four times, in every mode, in turn (which goes first rotates): as `POST /search`, and as a
`search` tool call through the official `mcp` SDK's client over Streamable HTTP to /mcp in
each of two sessions kept open as an agent keeps them: the client's default (it discovers
the protocol version 2026-07-28 and sends each call on its own) and `mode="legacy"` (the
initialize handshake of 2025-11-25, what desktop agents of 2025 speak; the service is
stateless, so each call is still a POST of its own). All go through one HTTP library
(httpx2, the SDK's transport) with keep-alive, from one asyncio loop.

A fourth way, `mcp_by_hand`, sends the same tool call as one JSON-RPC POST to /mcp written
here (no SDK client): the server's share of the difference, the rest being the client's.

Prints per mode p50/p95 of each, and of the difference of each question's MCP call and its
POST; the hits are checked to be the same. Also the time to open each MCP session and the
load average before and after; then one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import httpx2
import numpy as np
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from benchmarks import query as bench  # sets a fresh PREFECT_HOME under bench.WORK
from tasks.embed.models import DEFAULT_MODEL, get_embedder
from tasks.ingest.discover import discover
from tasks.search.params import MODES
from tasks.text.split import SplitSettings

K = 10  # hits per question, as benchmarks/query.py asks
WARMUP = 5  # questions asked every way before the timing, per mode
# The MCP sessions: name → the SDK client's connect mode.
SESSIONS = {"mcp": "auto", "mcp_legacy": "legacy"}
# A tools/call sent by hand, as a client of the 2025-11-25 protocol sends it to a stateless
# server (no session to open).
BY_HAND_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-11-25",
}


def summary(milliseconds: list[float]) -> dict[str, float]:
    p50, p95 = np.percentile(np.array(milliseconds), [50, 95])
    return {"p50_ms": round(float(p50), 2), "p95_ms": round(float(p95), 2)}


async def measure(base: str, questions: list[str]) -> dict[str, Any]:
    """Per mode: each question as POST /search and as an MCP search call in each session."""
    report: dict[str, Any] = {"session_open_ms": {}}
    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(httpx2.AsyncClient(base_url=base, timeout=120))
        sessions = {}
        for name, mode in SESSIONS.items():
            start = time.perf_counter()
            transport = streamable_http_client(f"{base}/mcp", http_client=http)
            sessions[name] = await stack.enter_async_context(Client(transport, mode=mode))
            report["session_open_ms"][name] = round((time.perf_counter() - start) * 1000, 1)
            await sessions[name].list_tools()  # as an agent does first (the client keeps them)

        async def post(body: dict[str, Any]) -> list[dict[str, Any]]:
            response = await http.post("/search", json=body)
            response.raise_for_status()
            return response.json()

        def tool(client: Client) -> Callable[[dict[str, Any]], Awaitable[list[dict[str, Any]]]]:
            async def call(body: dict[str, Any]) -> list[dict[str, Any]]:
                result = await client.call_tool("search", body)
                if result.is_error:
                    raise RuntimeError(f"the search tool failed: {result.content}")
                return result.structured_content["hits"]

            return call

        async def by_hand(body: dict[str, Any]) -> list[dict[str, Any]]:
            """The tool call as one JSON-RPC POST written here: the server's share alone."""
            call = {"name": "search", "arguments": body}
            message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}
            response = await http.post("/mcp", json=message, headers=BY_HAND_HEADERS)
            response.raise_for_status()
            return response.json()["result"]["structuredContent"]["hits"]

        calls = {
            "post": post,
            "mcp_by_hand": by_hand,
            **{name: tool(client) for name, client in sessions.items()},
        }
        for mode in MODES:
            bodies = [{"text": q, "k": K, "mode": mode} for q in questions]
            for body in bodies[:WARMUP]:
                for call in calls.values():
                    await call(body)
            times: dict[str, list[float]] = {name: [] for name in calls}
            for index, body in enumerate(bodies):
                order = list(calls.items())
                order = order[index % len(order) :] + order[: index % len(order)]
                found = {}
                for name, call in order:
                    start = time.perf_counter()
                    found[name] = [hit["chunk_id"] for hit in await call(body)]
                    times[name].append((time.perf_counter() - start) * 1000)
                if any(hits != found["post"] for hits in found.values()):
                    raise RuntimeError(f"MCP and POST /search differ for {body}")
            report[mode] = {name: summary(times[name]) for name in calls}
            for name in ["mcp_by_hand", *sessions]:
                extra = [m - p for m, p in zip(times[name], times["post"], strict=True)]
                report[mode][f"{name}_minus_post"] = summary(extra)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.mcp_latency",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rows", type=int, default=10_000, help="chunks in the dataset")
    parser.add_argument("--queries", type=int, default=50, help="questions per mode")
    parser.add_argument(
        "--smoke", action="store_true", help=f"data/sample passages, {bench.SMOKE_ROWS} rows"
    )
    args = parser.parse_args()
    if args.smoke:
        files = [s for s in discover(str(bench.SAMPLE)).files if s.doc_id in bench.SMOKE_FILES]
        questions, rows = list(bench.SMOKE_QUESTIONS), bench.SMOKE_ROWS
    elif all(d.is_dir() for d in bench.XQUAD):
        files = [source for d in bench.XQUAD for source in discover(str(d / "docs")).files]
        questions, rows = bench.questions_of(args.queries), args.rows
    else:
        print(f"skipped: {' or '.join(map(str, bench.XQUAD))} not found (../shared is absent)")
        return 0
    rng = np.random.default_rng(0)
    texts = bench.passages(files)
    embedder = get_embedder(DEFAULT_MODEL)
    fingerprint = bench.Fingerprint.of(embedder.info, SplitSettings())
    uri = str(bench.WORK / f"index-{rows}")
    built = bench.build(uri, rows, embedder.encode(texts), texts, fingerprint, rng)
    load_before = os.getloadavg()
    process, base = bench.serve(uri)
    try:
        report = asyncio.run(measure(base, questions))
    finally:
        process.terminate()
        process.wait()
    load_after = os.getloadavg()
    opened = ", ".join(f"{name} {ms} ms" for name, ms in report["session_open_ms"].items())
    print(
        f"{rows} chunks (written and finalized in {built:.1f} s), {len(questions)} questions "
        f"a mode, k={K}; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after; "
        f"MCP sessions opened in: {opened}"
    )
    shown = ["mcp_by_hand", *SESSIONS]
    columns = ["post", *shown, *(f"{name}_minus_post" for name in shown)]
    print("p50 / p95 ms  " + " | ".join(f"{name:>17}" for name in columns))
    for mode in MODES:
        row = report[mode]
        cells = [f"{row[c]['p50_ms']:7.1f} / {row[c]['p95_ms']:7.1f}" for c in columns]
        print(f"{mode:<12}  " + " | ".join(cells))
    print(json.dumps({"rows": rows, "questions": len(questions), **report}))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        shutil.rmtree(bench.WORK, ignore_errors=True)
