"""``ragidx mcp``: the knowledge base as a Model Context Protocol server (the official ``mcp`` SDK, low-level API).

Tools (each described for a model choosing among them):

- ``search``: the ranked whole articles for a query (``top_k``, ``filters`` as ``ragidx search --filter``);
- ``ask``: an answer written from the articles, with numbered citations and the sources it drew on;
- ``get_article``: one article by id.

Resources: every article the reader may read, as ``ragidx://article/{kb_id}`` (listed a page at a time, read by
URI). Everything runs as one reader, in the stores' own queries, so an article that reader may not read reaches
no tool result, resource list, resource or error:

- over stdio (``ragidx mcp``) the reader is ``mcp.user`` / ``mcp.groups`` (default: the public reader);
- over streamable HTTP (``ragidx mcp --http``, or ``ragidx serve`` with ``mcp.serve = true``) MCP is answered at
  ``/mcp`` by ``ragidx serve``'s own app, behind its key check: each request reads as its API key's reader
  (``serve.keys``), and a server without keys answers loopback clients only, as the public reader.

Errors say what was wrong with the call; a failure of the server names an error id, and the log holds the details
(as ``ragidx serve``'s 500s do).

Example:
    >>> server = build_server(engine, reader=lambda ctx: Principal())   # doctest: +SKIP
    >>> anyio.run(run_stdio, server)                                     # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import os
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError

from ragidx.providers.chat import LLMRequestError, LLMUnavailableError
from ragidx.providers.local_llm import LocalModelError
from ragidx.providers.model_queue import EngineBusyError
from ragidx.server.openai_format import RequestError, answer_extra, has_lone_surrogate, read_filters, sources_block
from ragidx.stores.access import Principal

if TYPE_CHECKING:
    from fastapi import FastAPI
    from starlette.types import Receive, Scope, Send

    from ragidx.article import Article
    from ragidx.engine import Engine

__all__ = [
    "ARTICLE_URI",
    "ENGINE_FACTORY_ENV",
    "McpEndpoint",
    "ToolFailure",
    "build_server",
    "mount_mcp",
    "run_stdio",
    "stdio_engine",
]

logger = logging.getLogger(__name__)

ARTICLE_URI = "ragidx://article/"
"""An article's resource URI is this and its kb_id, percent-encoded (``ragidx://article/calc%2Fprint``)."""

ENGINE_FACTORY_ENV = "RAGIDX_MCP_ENGINE_FACTORY"
"""``package.module:function`` building the stdio server's engine from ``Settings`` (tests: a scripted model)."""

MAX_TOP_K = 20

Reader = Callable[[ServerRequestContext[Any, Any]], Principal]

INSTRUCTIONS = (
    "ragidx answers from a knowledge base of articles (documentation, help pages, policies). Use `ask` for a "
    "question that needs an answer in words: it searches, reads and answers with numbered citations [n] and a "
    "Sources list; quote those citations to the user. Use `search` to find which articles cover a topic, to "
    "browse, or to read the material yourself; `get_article` reads one article whole by its kb_id. Filters narrow "
    "both to articles whose metadata matches (product, version, source ...)."
)

FILTERS_SCHEMA: dict[str, Any] = {
    "description": "Optional: only articles whose metadata matches, ANDed. Either an object of field -> value "
    '(a list means any of them), e.g. {"product": "writer", "version": [7, 8]}, or a list of conditions as '
    "`ragidx search --filter` takes them: key=value, key!=value, key>=value (also >, <, <=), 'key in a,b', "
    '\'key not in a,b\', e.g. ["product=writer", "version>=7"]. A field no article carries is an error naming '
    "the fields there are.",
    "anyOf": [{"type": "object"}, {"type": "array", "items": {"type": "string"}}],
}

TOOLS = [
    types.Tool(
        name="search",
        title="Search the knowledge base",
        description="Find the articles that best match a query, best first, each whole: its title, kb_id, URL, "
        "score and full text. Use it to see what the knowledge base holds on a topic or to read the sources "
        "yourself; it writes no answer (use `ask` for one). Plain words work best (the search is hybrid: "
        "keywords and meaning).",
        input_schema={
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for, in words (a question or key terms)."},
                "top_k": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_TOP_K,
                    "description": "How many articles to return (default: the server's top_k, usually 5).",
                },
                "filters": FILTERS_SCHEMA,
            },
            "required": ["query"],
        },
        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    ),
    types.Tool(
        name="ask",
        title="Ask the knowledge base",
        description="Answer a question from the knowledge base: ragidx searches (several times if needed), reads "
        "the best articles and writes a short answer whose claims cite them as [1], [2] ..., followed by a "
        "'Sources:' list (title and URL per number). When the articles do not answer the question it says so "
        "instead of guessing (not_found). Slower than `search` (a model writes the answer); ask one question "
        "per call.",
        input_schema={
            "type": "object",
            "properties": {
                "question": {"type": "string", "description": "The question, as a user would ask it."},
                "filters": FILTERS_SCHEMA,
            },
            "required": ["question"],
        },
        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    ),
    types.Tool(
        name="get_article",
        title="Read one article",
        description="Read one article whole by its kb_id (as `search`, `ask`'s sources or the resource list name "
        "it): title, URL, metadata and full text.",
        input_schema={
            "type": "object",
            "properties": {"kb_id": {"type": "string", "description": "The article's id."}},
            "required": ["kb_id"],
        },
        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    ),
]


class ToolFailure(Exception):
    """What a tool reports to the caller (``is_error``): written for them, naming nothing the server holds."""


def build_server(engine: Engine, *, reader: Reader, page_size: int | None = None) -> Server[Any]:
    """The MCP server over ``engine``; ``reader`` says who each request reads as (from its transport).

    Args:
        engine: the engine every tool calls (the caller's: close it after the server stops).
        reader: the request's reader: the configured one over stdio, the API key's over HTTP. It may raise
            :class:`PermissionError` to refuse the request.
        page_size: articles per page of the resource list (default: ``mcp.page_size``).
    """
    from ragidx import __version__

    settings = engine.settings
    page = page_size or settings.mcp.page_size
    max_chars = settings.serve.max_question_chars

    async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def call_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> Any:
        arguments = dict(params.arguments or {})
        try:
            who = reader(ctx)
            if params.name == "search":
                return await _search(engine, who, arguments)
            if params.name == "ask":
                return await _ask(engine, who, arguments, max_chars=max_chars)
            if params.name == "get_article":
                return await _get_article(engine, who, arguments)
        except ToolFailure as exc:
            return _error(str(exc))
        except Exception as exc:
            return _error(_failure_text(exc, engine))
        raise MCPError(
            code=types.INVALID_PARAMS, message=f"no tool named {params.name!r}: use search, ask or get_article"
        )

    async def list_resources(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListResourcesResult:
        cursor = getattr(params, "cursor", None) if params is not None else None
        try:
            after = _decode_cursor(cursor) if cursor else None
        except ValueError:
            raise MCPError(code=types.INVALID_PARAMS, message="this cursor is not one this server gave") from None
        try:
            articles, last = await asyncio.to_thread(_readable_page, engine, reader(ctx), after, page)
        except Exception as exc:  # its text may quote SQL or paths: an error id, the details in the log
            raise MCPError(code=types.INTERNAL_ERROR, message=_failure_text(exc, engine, "listing failed")) from None
        return types.ListResourcesResult(
            resources=[_resource(a) for a in articles], next_cursor=_encode_cursor(last) if last else None
        )

    async def list_templates(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListResourceTemplatesResult:
        template = types.ResourceTemplate(
            name="article",
            title="A knowledge-base article",
            uri_template=ARTICLE_URI + "{kb_id}",
            description="One article by its kb_id (percent-encoded), if you may read it.",
            mime_type="text/markdown",
        )
        return types.ListResourceTemplatesResult(resource_templates=[template])

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        if not uri.startswith(ARTICLE_URI) or len(uri) == len(ARTICLE_URI):
            raise MCPError(code=types.INVALID_PARAMS, message=f"unknown resource: write {ARTICLE_URI}KB_ID")
        kb_id = unquote(uri[len(ARTICLE_URI) :])
        try:
            found = (await asyncio.to_thread(engine.article_store.get, [kb_id], principal=reader(ctx))).get(kb_id)
        except Exception as exc:
            raise MCPError(code=types.INTERNAL_ERROR, message=_failure_text(exc, engine, "reading failed")) from None
        if found is None:
            raise MCPError(code=types.INVALID_PARAMS, message=_not_readable(kb_id))
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, text=_markdown(found), mime_type="text/markdown")]
        )

    return Server(
        "ragidx",
        version=__version__,
        title="ragidx knowledge base",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
    )


# --- the tools ----------------------------------------------------------------------------------------------------
async def _search(engine: Engine, who: Principal, arguments: dict[str, Any]) -> types.CallToolResult:
    query = _text_argument(arguments, "query")
    top_k = arguments.get("top_k")
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= MAX_TOP_K):
        raise ToolFailure(f"top_k must be a whole number from 1 to {MAX_TOP_K}")
    filters = await _filters(engine, arguments)
    articles = await asyncio.to_thread(
        engine.retrieve, query, top_k, filters=filters, user=who.user, groups=list(who.groups)
    )
    rows = [_article_row(a) for a in articles]
    if not rows:
        text = "No article matches this query" + (" and these filters." if filters is not None else ".")
    else:
        text = "\n\n".join(
            f"[{i}] {r['title']} (kb_id: {r['kb_id']}; score {r['rerank_score']:.3f})"
            + (f"\n{r['url']}" if r["url"] else "")
            + f"\n\n{r['content']}"
            for i, r in enumerate(rows, 1)
        )
    return types.CallToolResult(content=[_text(text)], structured_content={"query": query, "articles": rows})


async def _ask(engine: Engine, who: Principal, arguments: dict[str, Any], *, max_chars: int) -> types.CallToolResult:
    question = _text_argument(arguments, "question")
    if len(question) > max_chars:
        raise ToolFailure(f"the question is {len(question)} characters long; at most {max_chars} are accepted")
    filters = await _filters(engine, arguments)
    asked = engine.aask(question, filters=filters, user=who.user, groups=list(who.groups))
    from ragidx.questions.recorder import recorder_for  # the question log, surface "mcp" ([questions] settings)

    answer = await recorder_for(engine).logged(asked, question, user=who.user, groups=who.groups, surface="mcp")
    return types.CallToolResult(
        content=[_text(answer.text.strip() + sources_block(answer))], structured_content=answer_extra(answer)
    )


async def _get_article(engine: Engine, who: Principal, arguments: dict[str, Any]) -> types.CallToolResult:
    kb_id = _text_argument(arguments, "kb_id")
    found = (await asyncio.to_thread(engine.article_store.get, [kb_id], principal=who)).get(kb_id)
    if found is None:
        raise ToolFailure(_not_readable(kb_id))
    row = _article_row(found)
    return types.CallToolResult(content=[_text(_markdown(found))], structured_content=row)


def _text_argument(arguments: dict[str, Any], name: str) -> str:
    value = arguments.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ToolFailure(f"{name} must be a non-empty string")
    if has_lone_surrogate(value):
        raise ToolFailure(f"{name} holds a lone surrogate, which is not text")
    return value


async def _filters(engine: Engine, arguments: dict[str, Any]) -> Any:
    """The call's ``filters`` read as ``ragidx serve`` reads them, checked against the index (a field no article
    carries is refused here, before any search, with the fields there are)."""
    try:
        filters = read_filters(arguments.get("filters"))
        if filters is not None:
            await asyncio.to_thread(engine.check_filters, filters)
    except (RequestError, ValueError) as exc:
        raise ToolFailure(f"filters: {exc}") from None
    return filters


def _not_readable(kb_id: str) -> str:
    # the same words whether the article does not exist or may not be read: the reply tells nothing of others'
    return f"no article {kb_id!r} that you may read: check the id with search"


def _article_row(a: Article) -> dict[str, Any]:
    from ragidx.article import ARTICLE_RANK, NORMALIZED_RANK, RERANK_SCORE

    own = {k: v for k, v in a.metadata.items() if k not in _HIDDEN_FIELDS and not k.startswith(_HIDDEN_PREFIXES)}
    return {
        "kb_id": a.kb_id,
        "title": a.title,
        "url": a.url,
        "rerank_score": float(a.metadata.get(RERANK_SCORE, 0.0)),
        "normalized_rank": float(a.metadata.get(NORMALIZED_RANK, 0.0)),
        "article_rank": int(a.metadata.get(ARTICLE_RANK, 0)),
        "metadata": own,
        "content": a.content,
    }


_HIDDEN_FIELDS = frozenset({
    "rerank_score", "normalized_rank", "article_rank", "matched_chunk_ids", "matched_spans", "allowed", "sections",
    "file_stamp",
})  # fmt: skip
"""Ranks (given on their own), the search's bookkeeping, who may read it (never shown to a reader)."""
_HIDDEN_PREFIXES = ("flash_", "chain_", "injection_")


def _markdown(a: Article) -> str:
    head = f"# {a.title}\n\n" + (f"<{a.url}>\n\n" if a.url else "") + f"kb_id: {a.kb_id}\n\n"
    return head + a.content


def _resource(a: Article) -> types.Resource:
    return types.Resource(
        uri=ARTICLE_URI + quote(a.kb_id, safe=""),
        name=a.kb_id,
        title=a.title,
        description=a.url or None,
        mime_type="text/markdown",
        size=len(a.content.encode()),
    )


def _readable_page(engine: Engine, who: Principal, after: str | None, size: int) -> tuple[list[Article], str | None]:
    """A page of the articles ``who`` may read, in kb_id order, after ``after``; and the last one's id when more
    may follow. The store's own query decides what is readable (``get(..., principal=who)``); the cursor is the
    last id this reader was given, so it tells nothing of articles it may not read."""
    import bisect

    ids = engine.article_store.indexed_ids()
    start = bisect.bisect_right(ids, after) if after is not None else 0
    out: list[Article] = []
    while start < len(ids) and len(out) < size:
        batch = ids[start : start + max(size * 2, 64)]
        start += len(batch)
        found = engine.article_store.get(batch, principal=who)
        for kb_id in batch:
            if kb_id in found:
                out.append(found[kb_id])
                if len(out) == size:
                    start = bisect.bisect_right(ids, kb_id)
                    break
    more = len(out) == size and start < len(ids)
    return out, (out[-1].kb_id if more else None)


def _encode_cursor(kb_id: str) -> str:
    return base64.urlsafe_b64encode(kb_id.encode()).decode()


def _decode_cursor(cursor: str) -> str:
    try:
        kb_id = base64.b64decode(cursor.encode(), altchars=b"-_", validate=True).decode()
    except (binascii.Error, UnicodeError, ValueError) as exc:
        raise ValueError("bad cursor") from exc
    if not kb_id:
        raise ValueError("bad cursor")
    return kb_id


def _text(text: str) -> types.TextContent:
    return types.TextContent(type="text", text=text)


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[_text(message)], is_error=True)


def _failure_text(exc: Exception, engine: Engine, failed: str = "the tool failed") -> str:
    """What the caller reads when a tool failed: a busy queue's own words (written for callers), a refused
    reader's reason, else what failed and an error id; the exception goes to the log under that id (its text may
    quote SQL, paths, the reader or the tenant)."""
    if isinstance(exc, EngineBusyError):
        return str(exc)
    if isinstance(exc, PermissionError):
        return str(exc)
    if isinstance(exc, LocalModelError) or (isinstance(exc, LLMUnavailableError) and engine.settings.llm.is_local):
        what = "the local model is unavailable"
    elif isinstance(exc, LLMUnavailableError | LLMRequestError):
        what = "the model endpoint failed"
    else:
        what = failed
    error_id = uuid.uuid4().hex[:12]
    logger.error("%s (error id %s)", what, error_id, exc_info=exc)
    return f"{what} (error id {error_id}): see the server log"


# --- stdio --------------------------------------------------------------------------------------------------------
async def run_stdio(server: Server[Any]) -> None:
    """Serve ``server`` over this process's stdin and stdout until the client closes them (stray output of the
    engine or a model server goes to stderr, never onto the wire: the SDK points fd 1 there while it serves)."""
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def stdio_engine(settings: Any) -> Engine:
    """The stdio server's engine: ``Engine(settings)``, or what ``RAGIDX_MCP_ENGINE_FACTORY`` builds."""
    spec = os.environ.get(ENGINE_FACTORY_ENV, "").strip()
    if not spec:
        from ragidx.engine import Engine

        return Engine(settings)
    from ragidx.dashboard.engines import load_factory

    engine: Engine = load_factory(spec)(settings)
    return engine


# --- streamable HTTP, inside ragidx serve's app --------------------------------------------------------------------
class McpEndpoint:
    """The ASGI endpoint answering MCP's streamable HTTP at ``/mcp`` inside ``ragidx serve``'s app.

    Stateless (every POST stands alone, so any client and any number of server processes work), behind the app's
    own key check: the request's reader is the one that check admitted it as. The SDK's session manager needs a
    task group for the life of the server; it is started on the serving loop by the first MCP request and ends
    with that loop (so it works whether or not the ASGI server runs the app's lifespan).
    """

    def __init__(self, engine: Engine) -> None:
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
        from mcp.server.transport_security import TransportSecuritySettings

        from ragidx.server.app import _reader

        serve = engine.settings.serve
        security = None
        if not serve.has_keys:  # a keyless server answers loopback only: refuse pages that rebind a name to it
            security = TransportSecuritySettings(
                allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*", "127.0.0.1", "localhost", "[::1]"],
                allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
            )

        def reader(ctx: ServerRequestContext[Any, Any]) -> Principal:
            if ctx.request is None:  # never reached through the app: refuse rather than read as anyone
                raise PermissionError("this request carries no HTTP request to read its key from")
            return _reader(ctx.request)

        self.server = build_server(engine, reader=reader)
        self.manager = StreamableHTTPSessionManager(
            app=self.server,
            stateless=True,
            security_settings=security,
            max_request_body_size=serve.max_request_bytes,
        )
        self._ready: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    async def _running(self) -> None:
        if self._ready is None:
            self._ready = asyncio.Event()
            ready = self._ready

            async def hold() -> None:
                async with self.manager.run():
                    ready.set()
                    await asyncio.Event().wait()  # until the loop ends and cancels it

            self._task = asyncio.get_running_loop().create_task(hold(), name="ragidx-mcp-sessions")
        await self._ready.wait()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._running()
        await self.manager.handle_request(scope, receive, send)


def mount_mcp(app: FastAPI, engine: Engine, path: str = "/mcp") -> McpEndpoint:
    """Answer MCP (streamable HTTP) at ``path`` in ``ragidx serve``'s ``app`` (after its key check)."""
    from starlette.routing import Route

    endpoint = McpEndpoint(engine)
    app.router.routes.append(Route(path, endpoint=endpoint))
    return endpoint
