"""Hits as Markdown for a prompt: numbered quotes with their citations. `python -m
flows.query --format markdown` prints it; the MCP server's prompt `answer_with_sources`
(flows/mcp_server.py) quotes it."""

from __future__ import annotations

from tasks.search.hits import Hit


def render_markdown(hits: list[Hit]) -> str:
    """The hits as a numbered Markdown list of quotes (the context where there is one), each
    followed by its citation: source, section, page."""
    items = []
    for rank, hit in enumerate(hits, start=1):
        indent = " " * len(f"{rank}. ")
        quote = (hit.context if hit.context is not None else hit.text).strip().splitlines()
        lines = [f"> {line}".rstrip() for line in quote]
        citation = [hit.doc_id, *([hit.section] if hit.section else [])]
        if hit.page_number is not None:
            citation.append(f"page {hit.page_number}")
        lines += ["", f"— {', '.join(citation)}"]
        items.append(f"{rank}. {lines[0]}")
        items.extend(f"{indent}{line}" if line else "" for line in lines[1:])
        items.append("")
    return "\n".join(items).rstrip("\n")
