# Over 300 lines: the page's routes, form, highlighting and login, which share its templates.
"""The search page for people: server-rendered HTML at `/` of the service (flows/service.py).

    GET /            a search box, the mode and the common filters; with ?q=… the hits, their
                     matched words in <mark>, section, page and source, and a link to the
                     source file's folder (file://, local datasets)
    GET /context     the text around a hit (?chunk_id=…&q=…), an HTML fragment the hit's
                     <details> fetches when opened (a few lines of script, the page's only)
    GET /dataset     the dataset's stats and its failed files
    GET|POST /login  with a token: the form that sets the page's cookie

One search path: a page's search is a SearchRequest (its fields, declared once in
tasks/search/params.py, make the form) run by the service's `Searches`, as POST /search's is
(flows/service.py's `page_search` hands it over, a refusal as `Refused`); the text around a
hit is the MCP tool `read`'s, the stats its `stats`. The templates are
Jinja2's with autoescaping (flows/templates/): everything a document or a caller gave is text.

With a token, the page's paths need the cookie the login form sets (or the bearer header):
its value is an HMAC of the token, never the token, compared in constant time; HttpOnly,
SameSite=Strict, Secure over https.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin
from urllib.parse import parse_qs, urlencode

import regex
from fastapi import Request
from fastapi.responses import HTMLResponse, Response
from markupsafe import Markup, escape

from tasks.core.scripts import CJK
from tasks.search.request import SearchRequest
from tasks.search.snippet import snippet

if TYPE_CHECKING:
    from fastapi import FastAPI
    from jinja2 import Environment

    from tasks.search.searcher import Searcher

SEARCH_PATH, CONTEXT_PATH, DATASET_PATH, LOGIN_PATH = "/", "/context", "/dataset", "/login"
# The page's paths: with a token they take the page's cookie as well as the bearer header.
PAGE_PATHS = (SEARCH_PATH, CONTEXT_PATH, DATASET_PATH, LOGIN_PATH)
COOKIE = "doc_indexer_page"
# The search options the page's form offers, in its order (the others keep their defaults).
FORM_FIELDS = ("mode", "type", "source", "section", "author", "lang", "since", "until", "k")
SNIPPET_CHARS = 400  # characters of a hit's text shown; the rest is behind "text around"
CONTEXT_CHARS = 3_000  # characters of the text around a hit (the `read` tool's max_chars)

# A word (letters, digits, joiners), or one CJK run: the pieces a text is highlighted by.
_WORD = regex.compile(rf"[{CJK}]+|[[\w]--[{CJK}]](?:[\w'’.+#-]*\w)?[+#]*", regex.VERSION1)
_CJK_RUN = regex.compile(rf"[{CJK}]+")


class Refused(Exception):
    """A search the service will not run: HTTP status, message and the problems (field and
    message) of an invalid form, none of them echoing what was sent."""

    def __init__(
        self, status: int, message: str, problems: list[dict[str, str]] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.problems = status, message, problems or []


# The service's search: the mode it ran in and a request's hits as POST /search answers
# them, or Refused.
PageSearch = Callable[[SearchRequest], Awaitable[tuple[str, list[dict[str, Any]]]]]


@dataclass(frozen=True)
class FormField:
    """One search option as a form control: its name, label, help, choices or number range."""

    name: str
    help: str
    choices: tuple[str, ...] = ()
    number: tuple[int | None, int | None] | None = None  # (min, max) of a whole number
    default: str = ""


def form_fields() -> list[FormField]:
    """FORM_FIELDS as SearchRequest declares them (help, choices, bounds, default)."""
    fields = []
    for name in FORM_FIELDS:
        info = SearchRequest.model_fields[name]
        kinds = [kind for kind in get_args(info.annotation) if kind is not type(None)]
        kind = kinds[0] if kinds else info.annotation
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        choices: tuple[str, ...] = ()
        if get_origin(kind) is Literal:
            choices = tuple(str(choice) for choice in get_args(kind))
        elif isinstance(listed := extra.get("choices"), list):
            choices = tuple(str(choice) for choice in listed)
        number = None
        if kind is int:
            bounds = {type(m).__name__: m for m in info.metadata}
            number = (getattr(bounds.get("Ge"), "ge", None), getattr(bounds.get("Le"), "le", None))
        default = "" if info.default is None else str(info.default)
        fields.append(FormField(name, info.description or "", choices, number, default))
    return fields


def page_request(values: dict[str, str]) -> SearchRequest:
    """The SearchRequest of a submitted form: its question `q` and the filled FORM_FIELDS
    (text, converted as a JSON body's values would be); Refused (422, each field's problem)
    when the form asks for something POST /search would refuse."""
    from pydantic import ValidationError

    given: dict[str, Any] = {name: values[name] for name in FORM_FIELDS if values.get(name)}
    given["text"] = values.get("q", "")
    try:
        return SearchRequest.model_validate(given, strict=False)
    except ValidationError as exc:
        problems = [
            {
                "field": {"text": "question"}.get(place, place) if place in given else "form",
                "message": str(error["msg"]).removeprefix("Value error, "),
            }
            for error in exc.errors()
            for place in [str(error["loc"][0]) if error["loc"] else ""]
        ]
        raise Refused(422, "the form is not a valid search", problems) from None


def question_terms(question: str) -> set[str]:
    """The full-text terms of a question (tasks/text/analysis.py, as fts mode matches them)."""
    from tasks.text.analysis import terms

    return set(terms(question, query=True))


def highlighted(text: str, terms: set[str]) -> Markup:
    """`text` escaped, with each word whose analysed terms meet `terms` in <mark> (so that
    "owners" marks for a question about "ownership"), and within a CJK run each of the
    question's CJK terms where it occurs."""
    from tasks.text.analysis import terms as analysed

    cjk_terms = sorted((t for t in terms if _CJK_RUN.fullmatch(t)), key=len, reverse=True)
    # A particle the analyser keeps (的, 了) would mark half a page: one-character CJK terms
    # only mark when the question has no longer ones.
    cjk_terms = [t for t in cjk_terms if len(t) > 1] or cjk_terms
    cjk = regex.compile("|".join(map(regex.escape, cjk_terms))) if cjk_terms else None
    out, done = [], 0
    for word in _WORD.finditer(text):
        out.append(escape(text[done : word.start()]))
        run = word.group()
        if _CJK_RUN.fullmatch(run):
            out.append(marked_within(run, cjk))
        elif terms.intersection(analysed(run)):
            out.append(Markup("<mark>{}</mark>").format(run))
        else:
            out.append(escape(run))
        done = word.end()
    out.append(escape(text[done:]))
    return Markup("").join(out)


def marked_within(run: str, pattern: regex.Pattern[str] | None) -> Markup:
    """A CJK run escaped, each match of `pattern` in <mark>."""
    if pattern is None:
        return escape(run)
    out, done = [], 0
    for match in pattern.finditer(run):
        out += [escape(run[done : match.start()]), Markup("<mark>{}</mark>").format(match.group())]
        done = match.end()
    out.append(escape(run[done:]))
    return Markup("").join(out)


def folder_link(source_path: str) -> str | None:
    """A file:// link to the folder of a local source file; None for an object store's."""
    path = Path(source_path)
    if "://" in source_path or not path.is_absolute():
        return None
    return path.parent.as_uri()


def shown_hit(hit: dict[str, Any], question: str, terms: set[str]) -> dict[str, Any]:
    """What the page shows of a hit (a POST /search hit: a dict)."""
    context_query = urlencode({"chunk_id": hit["chunk_id"], "q": question})
    return {
        **hit,
        "excerpt": highlighted(snippet(hit["text"], question, SNIPPET_CHARS), terms),
        "folder": folder_link(hit["source_path"]),
        "context_url": f"{CONTEXT_PATH}?{context_query}",
    }


@cache
def templates() -> Environment:
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    folder = Path(__file__).with_name("templates")
    environment = Environment(
        loader=FileSystemLoader(folder), autoescape=select_autoescape(default=True)
    )
    environment.globals.update(
        search_path=SEARCH_PATH, dataset_path=DATASET_PATH, login_path=LOGIN_PATH
    )
    return environment


def render(name: str, status: int = 200, **values: Any) -> HTMLResponse:
    body = templates().get_template(name).render(**values)
    headers = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
    return HTMLResponse(body, status_code=status, headers=headers)


def page_cookie(token: str) -> str:
    """The page cookie's value for `token`: an HMAC of it, so the cookie is not the token."""
    return hmac.new(token.encode(), b"doc-indexer search page", hashlib.sha256).hexdigest()


def has_page_cookie(headers: dict[bytes, bytes], token: str) -> bool:
    """Whether a request's Cookie header holds the page cookie of `token` (constant time)."""
    expected = page_cookie(token).encode()
    for pair in headers.get(b"cookie", b"").split(b";"):
        name, _, value = pair.strip().partition(b"=")
        if name == COOKIE.encode() and hmac.compare_digest(value, expected):
            return True
    return False


def login_page(wrong: bool = False) -> HTMLResponse:
    """The login form, answered 401 (to a request without the cookie, or a wrong token)."""
    return render("login.html", status=401, wrong=wrong)


def add_search_page(
    app: FastAPI, searcher: Searcher, search: PageSearch, token: str | None
) -> None:
    """The page's routes on the service's app: its searches through `search` (the service's),
    the text around a hit and the stats from `searcher`; with `token`, the login form."""
    from fastapi.responses import RedirectResponse
    from pydantic import ValidationError
    from starlette.concurrency import run_in_threadpool

    from flows.mcp_server import ReadRequest, ToolProblem, read, stats

    fields = form_fields()

    @app.get(SEARCH_PATH, include_in_schema=False)
    async def search_page(request: Request) -> HTMLResponse:
        values = {name: value for name, value in request.query_params.items()}
        question = values.get("q", "")
        shown: dict[str, Any] = {"fields": fields, "values": values, "question": question}
        if not question.strip():
            return render("search.html", **shown)
        try:
            asked = page_request(values)
            mode, found = await search(asked)
        except Refused as exc:
            return render("search.html", status=exc.status, error=exc, **shown)
        terms = question_terms(question)
        hits = [shown_hit(hit, question, terms) for hit in found]
        return render("search.html", hits=hits, mode=mode, **shown)

    @app.get(CONTEXT_PATH, include_in_schema=False)
    async def context(chunk_id: str = "", q: str = "") -> HTMLResponse:
        try:
            where = ReadRequest(chunk_id=chunk_id, max_chars=CONTEXT_CHARS)
            passage = await run_in_threadpool(read, searcher, where)
        except (ToolProblem, ValidationError) as exc:
            message = str(exc) if isinstance(exc, ToolProblem) else "no such hit"
            return render("context.html", status=404, error=message)
        text = highlighted(passage["text"], question_terms(q) if q.strip() else set())
        return render("context.html", passage=passage, text=text)

    @app.get(DATASET_PATH, include_in_schema=False)
    def dataset_page() -> HTMLResponse:
        return render("dataset.html", stats=stats(searcher))

    @app.get(LOGIN_PATH, include_in_schema=False)
    def login_form() -> Response:
        if token is None:
            return RedirectResponse(SEARCH_PATH, status_code=303)
        return render("login.html", wrong=False)

    @app.post(LOGIN_PATH, include_in_schema=False)
    async def login(request: Request) -> Response:
        if token is None:
            return RedirectResponse(SEARCH_PATH, status_code=303)
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        given = (form.get("token") or [""])[0].strip()
        if not hmac.compare_digest(given.encode(), token.encode()):
            return login_page(wrong=True)
        answer = RedirectResponse(SEARCH_PATH, status_code=303)
        answer.set_cookie(
            COOKIE,
            page_cookie(token),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return answer
