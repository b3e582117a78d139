# Over 300 lines: each MCP tool's arguments, result and errors are declared beside it.
"""The dataset as a Model Context Protocol server: what an LLM agent searches and reads.

Tools (each with a JSON schema for its arguments and one for its structured result):
- `search`: a question with the search options of POST /search (tasks/search/request.py,
  SearchRequest: k, mode, the filters, context / expand, rerank on or off); the result is
  `{"mode", "hits"}`, the hits exactly as `python -m flows.query --json` prints them (the
  same Searcher.search), each its own citation: source_path, title, section, page_number,
  char_start / char_end (its range in the document text) and score.
- `read`: a document's text around a chunk (`chunk_id`) or in a character range (`doc_id`,
  `char_start`, `char_end`), at most `max_chars` characters (READ_LIMIT), with the range it
  covers and the chunks (sections, pages) it spans, so an agent reads on after a hit.
- `sources`: the ledger's documents (status, reason, error, chunks, metadata), a page at a
  time, optionally of one status.
- `stats`: what the dataset holds (`--stats`), its last run and its failed files.
The prompt `answer_with_sources` asks for an answer to a question from its hits, quoted and
numbered as `--format markdown` prints them.

An argument the tool cannot take, or a search the limits refuse, is a tool error (isError)
saying what was wrong; any other failure is a tool error that points to the server's log
(stderr), where its details go: a caller never sees a traceback or a server path.

Who runs the searches and the other tools' reading is the caller's choice (`create_server`'s
`search` and `bounded`): flows/service.py gives the service's own, with its limits, threads
and time limit, over stdio (flows/mcp.py) as over HTTP (/mcp).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, model_validator

from flows.render import render_markdown
from tasks.core.options import Settings, option
from tasks.dataset.location import DatasetError
from tasks.search.hits import Hit
from tasks.search.request import SearchRequest

if TYPE_CHECKING:
    from tasks.search.searcher import Searcher

log = logging.getLogger(__name__)
T = TypeVar("T")

READ_DEFAULT = 4_000  # characters `read` gives unless asked for fewer or more
READ_LIMIT = 20_000  # the most characters one `read` gives
SOURCES_LIMIT = 1_000  # the most documents one `sources` call lists
FAILED_SHOWN = 100  # the failed files `stats` names (documents_by_status counts them all)
# What the tools are about, for the agent (the server's instructions).
INSTRUCTIONS = (
    "Search a document index by meaning, full text or both (tool `search`), then read on "
    "around a hit (tool `read`). Cite hits by source_path, section and page_number. "
    "`sources` and `stats` say what is indexed, how fresh it is and which files failed."
)


class ToolProblem(Exception):
    """What the caller asked cannot be done: its message is the tool error the caller sees."""


# A search: {"mode": the mode it ran in, "hits": the hits as POST /search answers them}.
SearchFunction = Callable[[SearchRequest], Awaitable[dict[str, Any]]]


class Bounded(Protocol):
    """Runs a tool's blocking work (reading the dataset) off the event loop, within the
    caller's time limit; a ToolProblem past it."""

    def __call__(self, work: Callable[[], T], tool: str) -> Awaitable[T]: ...


class ReadRequest(Settings):
    """Where to read: around a chunk, or a document's character range."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    chunk_id: str | None = option(
        None, "read around this chunk (a hit's chunk_id); or give doc_id and char_start"
    )
    doc_id: str | None = option(None, "the document to read (a hit's doc_id), with char_start")
    char_start: int | None = option(
        None, "with doc_id: the first character to read (a hit's char_start or char_end)", ge=0
    )
    char_end: int | None = option(
        None, "with doc_id: read up to this character (default: char_start + max_chars)", ge=1
    )
    max_chars: int = option(
        READ_DEFAULT,
        "the most characters to give (around the chunk: centred on it)",
        ge=1,
        le=READ_LIMIT,
    )

    @model_validator(mode="after")
    def _one_place(self) -> ReadRequest:
        if (self.chunk_id is None) == (self.doc_id is None):
            raise ValueError("give either chunk_id, or doc_id with char_start")
        if self.chunk_id is not None and (self.char_start, self.char_end) != (None, None):
            raise ValueError("char_start and char_end go with doc_id, not with chunk_id")
        if self.doc_id is not None and self.char_start is None:
            raise ValueError("give char_start with doc_id (0 for the beginning)")
        if self.char_end is not None and self.char_start is not None:
            if self.char_end <= self.char_start:
                raise ValueError("char_end must be greater than char_start")
        return self


class SourcesRequest(Settings):
    """A page of the ledger's documents."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    status: Literal["indexed", "empty", "failed"] | None = option(
        None, "only documents that ended so: indexed, empty or failed"
    )
    offset: int = option(0, "documents to skip (by doc_id)", ge=0)
    limit: int = option(100, "the most documents to list", ge=1, le=SOURCES_LIMIT)


class StatsRequest(Settings):
    """No arguments."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class PromptRequest(BaseModel):
    """The prompt's arguments (MCP gives a prompt's arguments as text)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    question: str
    k: int = 5
    mode: Literal["vector", "fts", "hybrid"] | None = None


@dataclass(frozen=True)
class PassageChunk:
    """A chunk a passage spans: where it is, for a citation."""

    chunk_id: str
    chunk_index: int
    section: str
    page_number: int | None
    char_start: int
    char_end: int


@dataclass(frozen=True)
class Passage:
    """What `read` gives: `text` is the document's text from `char_start` to `char_end`
    (whitespace between chunks, which is not stored, written as one space or a blank line);
    `document_end` is where the document's text ends, so the next read starts at char_end."""

    doc_id: str
    source_path: str
    title: str
    text: str
    char_start: int
    char_end: int
    document_end: int
    chunks: list[PassageChunk]


@dataclass(frozen=True)
class SearchResult:
    mode: Literal["vector", "fts", "hybrid"]  # the mode the search ran in
    hits: list[Hit]


_OBJECT = {"type": "object"}
_TEXT_OR_NONE = {"type": ["string", "null"]}
# Handwritten where the result is the dataset's own description (tasks/search/info.py).
SOURCES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "total": {"type": "integer", "description": "documents of that status in all"},
        "offset": {"type": "integer"},
        "documents": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "doc_id": {"type": "string"},
                    "status": {"type": "string", "enum": ["indexed", "empty", "failed"]},
                    "reason": _TEXT_OR_NONE,
                    "error": _TEXT_OR_NONE,
                    "n_chunks": {"type": "integer"},
                    "mtime": {"type": "string"},
                    "title": _TEXT_OR_NONE,
                },
                "required": ["doc_id", "status", "reason", "n_chunks", "mtime"],
            },
        },
    },
    "required": ["total", "offset", "documents"],
}
STATS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "chunks": {"type": "integer"},
        "documents": {"type": "integer"},
        "documents_by_status": _OBJECT,
        "model": {"type": "string"},
        "table_version": {"type": "integer"},
        "run_tags": {"type": "object", "description": "tag: chunks table version, oldest first"},
        "last_run": {**_TEXT_OR_NONE, "description": "the newest run tag (run-<UTC time>)"},
        "default_mode": {"type": "string"},
        "failed": {
            "type": "array",
            "description": f"the first {FAILED_SHOWN} failed files with their reasons",
            "items": {
                "type": "object",
                "properties": {
                    "doc_id": {"type": "string"},
                    "reason": _TEXT_OR_NONE,
                    "error": _TEXT_OR_NONE,
                },
                "required": ["doc_id", "reason", "error"],
            },
        },
    },
    "required": [
        "chunks", "documents", "documents_by_status", "model", "run_tags", "last_run",
        "default_mode", "failed",
    ],
}  # fmt: skip


def input_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of a tool's arguments: the options model's, without the command line's
    hints; a text option's choices as its enum, dates as text (an age like 7d is one)."""
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        for key in ("title", "positional", "flag", "metavar", "several", "internal"):
            prop.pop(key, None)
        choices = prop.pop("choices", None)
        for branch in prop.get("anyOf", [prop]):
            branch.pop("format", None)
            if choices and branch.get("type") == "string":
                branch["enum"] = choices
    return schema


def output_schema(kind: Any) -> dict[str, Any]:
    """The JSON schema of a tool's structured result, in the form that is quick to check:
    the MCP client validates every result against it (the `mcp` SDK's with jsonschema, about
    2.3 ms for ten hits as pydantic writes the schema, 1.5 ms in this form)."""
    schema = TypeAdapter(kind).json_schema()
    return lean_schema(schema, schema.get("$defs", {}))


_NULL = {"type": "null"}


def lean_schema(node: Any, definitions: dict[str, Any]) -> Any:
    """`node` with its $refs written out, `anyOf: [X, null]` as `type: [X, "null"]` and no
    titles or defaults (names pydantic derives and values a result does not take): the same
    results are valid, with fewer keywords to check."""
    if isinstance(node, list):
        return [lean_schema(item, definitions) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return lean_schema(definitions[node["$ref"].rsplit("/", 1)[-1]], definitions)
    branches = node.get("anyOf")
    if isinstance(branches, list) and len(branches) == 2 and _NULL in branches:
        [kind] = [branch for branch in branches if branch != _NULL]
        if isinstance(kind.get("type"), str):
            node = {key: value for key, value in node.items() if key != "anyOf"} | kind
            node["type"] = [kind["type"], "null"]
            if "enum" in kind:
                node["enum"] = [*kind["enum"], None]
    lean = {}
    for key, value in node.items():
        if key in ("$defs", "title", "default"):
            continue
        if key == "properties":  # names of fields, not keywords
            lean[key] = {name: lean_schema(field, definitions) for name, field in value.items()}
        else:
            lean[key] = lean_schema(value, definitions)
    return lean


READ_ONLY = types.ToolAnnotations(read_only_hint=True, open_world_hint=False)


def read_only_tool(
    name: str, title: str, description: str, request: type[BaseModel], result: dict[str, Any]
) -> types.Tool:
    """A tool that reads the dataset and nothing outside it: its arguments' schema from
    `request`, its structured result's `result`."""
    return types.Tool(
        name=name,
        title=title,
        description=description,
        input_schema=input_schema(request),
        output_schema=result,
        annotations=READ_ONLY,
    )


TOOLS = [
    read_only_tool(
        "search",
        "Search the documents",
        (
            "Find the chunks of the indexed documents that answer a question, best first. "
            "Each hit carries its citation: source_path, title, section, page_number, "
            "char_start/char_end (its range in the document, for `read`) and score. "
            "`context` (neighbouring chunks) or `expand: section` add the text around each hit."
        ),
        SearchRequest,
        output_schema(SearchResult),
    ),
    read_only_tool(
        "read",
        "Read a document",
        (
            "A document's text around a chunk (chunk_id from a hit) or from a character range "
            f"(doc_id, char_start, char_end), at most max_chars ({READ_LIMIT:,} or fewer) "
            "characters, with the chunks (sections, pages) it spans. Read on from char_end."
        ),
        ReadRequest,
        output_schema(Passage),
    ),
    read_only_tool(
        "sources",
        "List the documents",
        (
            "The documents of the index's ledger by doc_id: status (indexed, empty, failed), "
            "the reason and error of those that are not indexed, chunk count, modification "
            "time, title and metadata; a page at a time (offset, limit)."
        ),
        SourcesRequest,
        SOURCES_SCHEMA,
    ),
    read_only_tool(
        "stats",
        "Describe the index",
        (
            "What the index holds (chunks, documents by status, model, indexes, languages), "
            "its last ingest run and its failed files with their reasons."
        ),
        StatsRequest,
        STATS_SCHEMA,
    ),
]

PROMPTS = [
    types.Prompt(
        name="answer_with_sources",
        title="Answer with sources",
        description=(
            "Search for the question and ask for an answer from the hits, given as numbered "
            "quotes with their source, section and page."
        ),
        arguments=[
            types.PromptArgument(name="question", description="the question", required=True),
            types.PromptArgument(name="k", description="how many quotes (default 5)"),
            types.PromptArgument(name="mode", description="vector, fts or hybrid"),
        ],
    )
]


def problems(exc: ValidationError) -> str:
    """A validation error as `field: message; …`, never repeating the caller's values."""
    found = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"]) or "arguments"
        if error["type"] == "extra_forbidden":
            message = "not an argument of this tool"
        else:
            message = str(error["msg"]).removeprefix("Value error, ")
        found.append(f"{field}: {message}" if error["loc"] else message)
    return "; ".join(found)


def arguments(model: type[Any], given: dict[str, Any] | None) -> Any:
    """The tool's arguments validated as JSON (as POST /search validates its body)."""
    try:
        return model.model_validate_json(json.dumps(given or {}))
    except ValidationError as exc:
        raise ToolProblem(f"invalid arguments: {problems(exc)}") from None


def create_server(searcher: Searcher, search: SearchFunction, bounded: Bounded) -> Server[Any]:
    """The MCP server over one open dataset; `search` runs a search request (and raises a
    ToolProblem when it refuses one), `bounded` the other tools' reading of the dataset."""

    async def call(name: str, given: dict[str, Any] | None) -> dict[str, Any]:
        if name == "search":
            return await search(arguments(SearchRequest, given))
        if name == "read":
            return await bounded(partial(read, searcher, arguments(ReadRequest, given)), name)
        if name == "sources":
            request = arguments(SourcesRequest, given)
            return await bounded(partial(sources, searcher, request), name)
        if name == "stats":
            arguments(StatsRequest, given)
            return await bounded(partial(stats, searcher), name)
        raise ToolProblem(
            f"no tool named {name[:80]!r}: the tools are search, read, sources, stats"
        )

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            result = await call(params.name, params.arguments)
        except ToolProblem as exc:
            return tool_error(str(exc))
        except DatasetError as exc:
            log.warning("the dataset refused tool %s: %s", params.name, exc)
            return tool_error("the dataset cannot answer this now; the server's log says why")
        except Exception:  # noqa: BLE001 - any other failure: logged, never shown
            log.exception("tool %s failed", params.name)
            return tool_error("the tool failed; the server's log says why")
        text = json.dumps(result, ensure_ascii=False)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], structured_content=result
        )

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def on_list_prompts(ctx: Any, params: Any) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=PROMPTS)

    async def on_get_prompt(
        ctx: Any, params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        if params.name != "answer_with_sources":
            raise MCPError(types.INVALID_PARAMS, "no prompt of that name: answer_with_sources")
        try:
            asked = PromptRequest.model_validate(params.arguments or {})
            request = arguments(
                SearchRequest, {"text": asked.question, "k": asked.k, "mode": asked.mode}
            )
            found = await search(request)
        except ValidationError as exc:
            raise MCPError(types.INVALID_PARAMS, f"invalid arguments: {problems(exc)}") from None
        except ToolProblem as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc)) from None
        except Exception:  # noqa: BLE001 - as for tools: logged, never shown
            log.exception("prompt answer_with_sources failed")
            raise MCPError(
                types.INTERNAL_ERROR, "the search failed; the server's log says why"
            ) from None
        text = answer_prompt(asked.question, [Hit(**hit) for hit in found["hits"]])
        return types.GetPromptResult(
            description=f"{len(found['hits'])} quotes for the question",
            messages=[
                types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))
            ],
        )

    return Server(
        "doc-indexer",
        instructions=INSTRUCTIONS,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        on_list_prompts=on_list_prompts,
        on_get_prompt=on_get_prompt,
    )


def tool_error(message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)], is_error=True
    )


def answer_prompt(question: str, hits: list[Hit]) -> str:
    """The question and its hits as numbered quotes with their sources (flows/render.py)."""
    quotes = render_markdown(hits) if hits else "(the search found nothing)"
    return (
        "Answer the question from the numbered quotes below, which a search of the document "
        "index found. Cite each quote you use by its number, e.g. [2]. If the quotes do not "
        "answer the question, say so.\n\n"
        f"Question: {question}\n\nQuotes:\n\n{quotes}\n"
    )


CHUNK_COLUMNS = [
    "chunk_id", "doc_id", "source_path", "title", "section", "page_number", "chunk_index",
    "char_start", "char_end",
]  # fmt: skip


def read(searcher: Searcher, request: ReadRequest) -> dict[str, Any]:
    """The passage `request` asks for (tasks/search/context.py joins the chunks)."""
    from tasks.dataset.sql import sql_string
    from tasks.search.context import Piece, join_pieces

    chunks = searcher.dataset.chunks
    width = request.max_chars
    if request.chunk_id is not None:
        where = f"chunk_id = {sql_string(request.chunk_id)}"
        found = chunks.search().where(where).select(CHUNK_COLUMNS).limit(1).to_list()
        if not found:
            raise ToolProblem(
                "no chunk with this chunk_id in the index (its document may have been "
                "re-indexed since: search again)"
            )
        anchor = found[0]
        doc_id = anchor["doc_id"]
        length = anchor["char_end"] - anchor["char_start"]
        start = max(0, anchor["char_start"] - max(0, width - length) // 2)
        end = start + width
    else:
        assert request.doc_id is not None and request.char_start is not None
        doc_id, start = request.doc_id, request.char_start
        end = min(request.char_end or start + width, start + width)
    of_doc = f"doc_id = {sql_string(doc_id)}"
    places = chunks.search().where(of_doc).select(["char_end"]).limit(None).to_arrow()
    if places.num_rows == 0:
        raise ToolProblem("no document with this doc_id in the index (see the tool sources)")
    document_end = max(places["char_end"].to_pylist())
    where = f"{of_doc} AND char_end > {start} AND char_start < {end}"
    rows = chunks.search().where(where).select([*CHUNK_COLUMNS, "text"]).limit(None).to_list()
    if not rows:
        raise ToolProblem(f"the document has no text there: it ends at character {document_end}")
    rows.sort(key=lambda row: row["chunk_index"])
    pieces = [
        Piece(row["chunk_index"], row["section"], row["text"], row["char_start"], row["char_end"])
        for row in rows
    ]
    joined, starts = join_pieces(pieces)
    first, last = pieces[0], pieces[-1]
    cut_from = starts[0] + max(0, start - first.char_start)
    cut_to = starts[-1] + min(len(last.text), max(0, end - last.char_start))
    passage = Passage(
        doc_id=doc_id,
        source_path=rows[0]["source_path"],
        title=rows[0]["title"],
        text=joined[cut_from:cut_to],
        char_start=max(start, first.char_start),
        char_end=min(end, last.char_end),
        document_end=document_end,
        chunks=[PassageChunk(**{name: row[name] for name in PASSAGE_CHUNK_FIELDS}) for row in rows],
    )
    return asdict(passage)


PASSAGE_CHUNK_FIELDS = [name for name in PassageChunk.__dataclass_fields__]


def sources(searcher: Searcher, request: SourcesRequest) -> dict[str, Any]:
    from tasks.search.info import list_sources

    rows = [row for row in list_sources(searcher) if request.status in (None, row["status"])]
    shown = rows[request.offset : request.offset + request.limit]
    return {"total": len(rows), "offset": request.offset, "documents": shown}


def stats(searcher: Searcher) -> dict[str, Any]:
    from tasks.search.info import index_stats, list_sources

    found = index_stats(searcher)
    failed = [
        {"doc_id": row["doc_id"], "reason": row["reason"], "error": row["error"]}
        for row in list_sources(searcher)
        if row["status"] == "failed"
    ]
    tags = list(found["run_tags"])
    return {**found, "last_run": tags[-1] if tags else None, "failed": failed[:FAILED_SHOWN]}
