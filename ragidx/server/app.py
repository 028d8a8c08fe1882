"""``ragidx serve``'s HTTP edge: an OpenAI-compatible API over one :class:`~ragidx.engine.Engine`.

Every route is a thin call into the engine; the queue, the sessions and the model's lifecycle live there. Routes:

- ``POST /v1/chat/completions``: OpenAI's chat API, whole or streamed (server-sent events). The request's messages
  are the conversation: the last user message is the question, the earlier user and assistant turns its history.
  The answer carries ragidx's extra field ``ragidx`` (``text``, ``citations``, ``sources`` with their ranks,
  ``not_found``, ``reason``, ``queries``, ``timings``; on a stream, in the closing chunk) and ends with a
  "Sources:" block naming the cited articles, for clients that ignore extra fields.
- ``POST /v1/search``: ``{"query", "top_k", "filters"}`` -> the ranked whole articles.
- ``GET /v1/models``, ``GET /health``, ``GET /metrics`` (Prometheus).

Who reads: each API key is a reader (``serve.keys``: a user and groups; a key without them, and every request to
a server without keys, is the public reader). Every search a request makes runs as its key's reader, in the
stores' queries, so an article that reader may not read reaches no answer, source, citation, search result or
error. A request may narrow with ``filters`` (:func:`~ragidx.server.openai_format.read_filters`) but never
names a reader: a body that does is refused (403), except OpenAI's own ``user`` field of a chat request, an
end-user id for logs, which is ignored.

Errors are OpenAI's error JSON: 400 malformed JSON or request (bad ``filters``, a body nested deeper than
``MAX_JSON_DEPTH``, text with a lone surrogate, a question over ``serve.max_question_chars`` or
``serve.max_question_tokens`` too), 401 a missing or wrong key, 403 a non-loopback client of a server without keys
or a body naming a reader, 408 a body not sent within ``serve.request_timeout_s``, 413 a request over
``serve.max_request_bytes``, 429 the model queue is full or the key's reader holds its share of it
(``Retry-After``), 503 the local model is down, 502 a remote endpoint failed or refused, 500 anything else. An
error says what was wrong with the request, never what the server holds: a 500, 502 or 503 names an error id and
the server's log holds the details (no SQL, file path, reader or tenant ever reaches a client).

Logs (the ``ragidx.server`` loggers; ``ragidx serve`` writes them to stderr as one JSON object per line,
:mod:`ragidx.server.logs`): one line per request on ``ragidx.server.access`` (method, route, status, seconds, the
key's entry such as ``keys[0]`` and its reader; never the key; the question only with ``serve.log_questions``).

Example:
    >>> app = create_app(Engine(Settings(data_dir="/tmp/kb")))        # doctest: +SKIP
    >>> uvicorn.run(app, host="127.0.0.1", port=8000)                  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from llama_index.core.vector_stores.types import MetadataFilters
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ingestion.sync.routes import router as sources_router
from ragidx.engine import Engine
from ragidx.providers.chat import LLMRequestError, LLMUnavailableError
from ragidx.providers.local_llm import LocalModelError
from ragidx.providers.model_queue import EngineBusyError
from ragidx.questions.gaps_routes import router as gaps_router
from ragidx.questions.recorder import Turn, recorder_for
from ragidx.questions.routes import router as questions_router
from ragidx.server.openai_format import (
    CHAT_READER_FIELDS,
    READER_FIELDS,
    RequestError,
    chat_chunk,
    chat_completion,
    check_body,
    completion_id,
    error_body,
    read_conversation,
    read_filters,
    refuse_reader_fields,
    sources_block,
)
from ragidx.stores.access import Principal

__all__ = ["create_app", "is_loopback"]

logger = logging.getLogger(__name__)
access_log = logging.getLogger("ragidx.server.access")
T = TypeVar("T")


class _TooLarge(Exception):
    pass


class _TooSlow(Exception):
    pass


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (an address or ``localhost``) is this machine's loopback."""
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _Metrics:
    """The server's Prometheus metrics, in a registry of its own (several apps in one process never clash)."""

    def __init__(self, engine: Engine) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "ragidx_http_requests", "HTTP requests by route and status", ["route", "status"], registry=self.registry
        )
        self.answers = Counter(
            "ragidx_answers",
            "Questions answered, by outcome (answered, not_found)",
            ["outcome"],
            registry=self.registry,
        )
        self.errors = Counter(
            "ragidx_errors", "Questions that ended in an error, by kind", ["kind"], registry=self.registry
        )
        self.answer_seconds = Histogram(
            "ragidx_answer_seconds",
            "A question's own time, from its turn at the model to the answer",
            buckets=(1, 2, 5, 10, 20, 40, 60, 120, 300, 600),
            registry=self.registry,
        )
        self.wait_seconds = Histogram(
            "ragidx_queue_wait_seconds",
            "Time a question waited in the model queue",
            buckets=(0.01, 0.1, 1, 5, 10, 30, 60, 120, 300),
            registry=self.registry,
        )
        queue = engine.model_queue
        Gauge("ragidx_queue_waiting", "Questions waiting for the model", registry=self.registry).set_function(
            lambda: queue.stats().waiting
        )
        Gauge("ragidx_queue_busy", "Questions the model is answering", registry=self.registry).set_function(
            lambda: queue.stats().busy
        )
        Gauge("ragidx_queue_slots", "Questions the model answers at once", registry=self.registry).set(queue.slots)

    def answered(self, answer: Any) -> None:
        self.answers.labels("not_found" if answer.not_found else "answered").inc()
        self.answer_seconds.observe(float(answer.timings.get("total", 0.0)))
        self.wait_seconds.observe(float(answer.timings.get("queue_wait", 0.0)))


def create_app(engine: Engine) -> FastAPI:
    """The FastAPI app serving ``engine`` (the engine stays the caller's: close it after the server stops)."""
    settings = engine.settings.serve
    keyed = len(settings.keys)
    readers = [
        (key.encode(), Principal.of(user, groups), f"keys[{i}]" if i < keyed else f"api_keys[{i - keyed}]")
        for i, (key, user, groups) in enumerate(settings.key_readers())
    ]
    model_id = settings.model_name
    metrics = _Metrics(engine)
    app = FastAPI(title="ragidx", summary="OpenAI-compatible answers with citations from a knowledge base")
    app.state.engine = engine
    app.state.metrics = metrics

    def error(status: int, message: str, *, kind: str, code: str | None = None, **headers: str) -> JSONResponse:
        return JSONResponse(error_body(message, kind=kind, code=code), status_code=status, headers=headers or None)

    def engine_error(exc: Exception) -> JSONResponse:
        """The HTTP error for what went wrong while answering (counted by kind). Only a busy queue's message, which
        the queue writes for the caller, reaches the client; every other names an error id, and the server's log
        holds the exception under it (its text may quote SQL, paths, the reader or the tenant)."""
        if isinstance(exc, EngineBusyError):
            metrics.errors.labels("busy").inc()
            retry = f"{exc.retry_after_s:.0f}"
            return error(429, str(exc), kind="server_busy", code="model_busy", **{"Retry-After": retry})
        if isinstance(exc, LocalModelError) or (isinstance(exc, LLMUnavailableError) and engine.settings.llm.is_local):
            metrics.errors.labels("model_down").inc()
            return failure(503, "the local model is unavailable", exc, code="model_unavailable")
        if isinstance(exc, LLMUnavailableError | LLMRequestError):
            metrics.errors.labels("endpoint").inc()
            return failure(502, "the model endpoint failed", exc, code="upstream_error")
        metrics.errors.labels("internal").inc()
        return failure(500, "answering failed", exc, code="internal_error")

    def failure(status: int, what: str, exc: BaseException, *, code: str) -> JSONResponse:
        """``what`` went wrong (error id XYZ): the exception is logged under the id, never sent."""
        error_id = uuid.uuid4().hex[:12]
        logger.error("%s (error id %s)", what, error_id, exc_info=exc)
        return error(status, f"{what} (error id {error_id}): see the server log", kind="server_error", code=code)

    def admission(request: Request) -> Response | Principal:
        """Who the request reads as, or why it is refused: loopback only without keys (as the public reader); a
        key with them (as its reader); a declared body within the size limit."""
        client = request.client.host if request.client else None
        if not readers and not is_loopback(client):
            return error(403, "this server has no API keys and answers only loopback clients", kind="permission_error")
        reader = Principal()
        if readers and request.url.path != "/health":
            found = _reader_of(request.headers.get("authorization"), readers)
            if found is None:
                metrics.errors.labels("auth").inc()
                return error(
                    401,
                    "missing or wrong API key: send 'Authorization: Bearer KEY' with a key this server was given",
                    kind="invalid_request_error",
                    code="invalid_api_key",
                )
            reader, entry = found
            request.scope.setdefault("state", {})[_KEY] = entry
        if _declared_size(request) > settings.max_request_bytes:
            metrics.errors.labels("too_large").inc()
            return _too_large(settings.max_request_bytes)
        return reader

    # A plain ASGI middleware (not @app.middleware, whose wrapped receive hides a client's hang-up from the routes)
    app.add_middleware(_Guard, admission=admission, counter=metrics.requests)
    app.include_router(questions_router)  # POST /v1/feedback, GET /v1/admin/... (ragidx.questions.routes)
    app.include_router(gaps_router)  # /v1/admin/gaps, /v1/admin/curated (ragidx.questions.gaps_routes)
    app.include_router(sources_router)  # GET /v1/admin/sources (ingestion.sync.routes)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return error(exc.status_code, str(exc.detail), kind=kind)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        metrics.errors.labels("internal").inc()
        return failure(500, "answering failed", exc, code="internal_error")

    async def read_json(request: Request) -> dict[str, Any]:
        """The body as a JSON object every later step can read: within the size limit, sent within
        ``serve.request_timeout_s``, no deeper than ``MAX_JSON_DEPTH``, no lone surrogates, no NaN."""
        body = bytearray()
        try:
            async with asyncio.timeout(settings.request_timeout_s):
                async for part in request.stream():
                    body.extend(part)
                    if len(body) > settings.max_request_bytes:
                        raise _TooLarge
        except TimeoutError:
            raise _TooSlow from None
        try:
            data = json.loads(body, parse_constant=_no_constant)
        except RecursionError:
            raise RequestError("the request body is nested too deeply") from None
        except ValueError as exc:
            raise RequestError(f"the request body is not valid JSON: {_plain(exc)}") from None
        if not isinstance(data, dict):
            raise RequestError("the request body must be a JSON object")
        check_body(data)
        return data

    async def parsed(request: Request) -> dict[str, Any] | JSONResponse:
        try:
            return await read_json(request)
        except _TooLarge:
            metrics.errors.labels("too_large").inc()
            return _too_large(settings.max_request_bytes)
        except _TooSlow:
            metrics.errors.labels("timeout").inc()
            return JSONResponse(
                error_body(f"the request body was not sent within {settings.request_timeout_s:g} s "
                           "(serve.request_timeout_s)", kind="invalid_request_error", code="request_timeout"),
                status_code=408, headers={"Connection": "close"},
            )  # fmt: skip
        except ClientDisconnect:  # nobody reads this; the access log records a 499, as for an answer abandoned
            return JSONResponse(error_body("the client hung up while sending", kind="invalid_request_error"),
                                status_code=499)  # fmt: skip
        except RequestError as exc:
            return bad_request(exc)

    def bad_request(exc: RequestError) -> JSONResponse:
        metrics.errors.labels("bad_request").inc()
        return JSONResponse(error_body(str(exc), kind="invalid_request_error", param=exc.param), status_code=400)

    counter: list[Any] = []  # the chat model's token counter, made on the first question

    def check_tokens(question: str) -> None:
        """Refuse a question over ``serve.max_question_tokens`` tokens of the chat model's own tokenizer (the one
        its prompts are budgeted with; cheap: tiktoken or the GGUF vocabulary, no weights)."""
        if not counter:
            counter.append(engine.llm_provider.token_counter(engine.settings.llm))
        tokens = counter[0].count(question)
        if tokens > settings.max_question_tokens:
            raise RequestError(
                f"the question is {tokens} tokens long; at most {settings.max_question_tokens} are accepted",
                param="messages",
            )

    async def narrowing(data: dict[str, Any], reader_fields: tuple[str, ...]) -> MetadataFilters | None | JSONResponse:
        """The request's ``filters`` (None: none), checked against the index; or the 400 / 403 that refuses a bad
        filter or a body naming a reader."""
        try:
            refuse_reader_fields(data, reader_fields)
            filters = read_filters(data.get("filters"))
            if filters is not None:
                try:
                    await asyncio.to_thread(engine.check_filters, filters)
                except ValueError as exc:
                    raise RequestError(f"filters: {exc}", param="filters") from None
        except PermissionError as exc:
            metrics.errors.labels("forbidden").inc()
            return error(403, str(exc), kind="permission_error", code="reader_from_key")
        except RequestError as exc:
            return bad_request(exc)
        return filters

    @app.get("/health")
    async def health() -> dict[str, Any]:
        stats = engine.model_queue.stats()
        return {"status": "ok", "model": model_id, "queue": stats.__dict__, "llm": _model_state(engine)}

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_id, "object": "model", "created": 0, "owned_by": "ragidx"}]}

    @app.post("/v1/search", response_model=None)
    async def search(request: Request) -> dict[str, Any] | JSONResponse:
        data = await parsed(request)
        if isinstance(data, JSONResponse):
            return data
        reader = _reader(request)
        query, top_k = data.get("query"), data.get("top_k")
        if not isinstance(query, str) or not query.strip():
            return JSONResponse(error_body("query must be a non-empty string", kind="invalid_request_error",
                                           param="query"), status_code=400)  # fmt: skip
        if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= 100):
            return JSONResponse(error_body("top_k must be an integer from 1 to 100", kind="invalid_request_error",
                                           param="top_k"), status_code=400)  # fmt: skip
        filters = await narrowing(data, READER_FIELDS)
        if isinstance(filters, JSONResponse):
            return filters
        try:
            articles = await asyncio.to_thread(
                engine.retrieve, query, top_k, filters=filters, user=reader.user, groups=reader.groups
            )
        except Exception as exc:
            return engine_error(exc)
        return {
            "object": "list",
            "query": query,
            "data": [
                {
                    "kb_id": a.kb_id,
                    "title": a.title,
                    "url": a.url,
                    "content": a.content,
                    **{k: a.metadata.get(k) for k in ("rerank_score", "normalized_rank", "article_rank")},
                }
                for a in articles
            ],
        }

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(request: Request) -> Response | dict[str, Any]:
        data = await parsed(request)
        if isinstance(data, JSONResponse):
            return data
        try:
            question, history = read_conversation(data.get("messages"), max_question_chars=settings.max_question_chars)
            await asyncio.to_thread(check_tokens, question)
        except RequestError as exc:
            return bad_request(exc)
        if settings.log_questions:
            request.scope.setdefault("state", {})[_QUESTION] = question
        filters = await narrowing(data, CHAT_READER_FIELDS)
        if isinstance(filters, JSONResponse):
            return filters
        reader = _reader(request)
        reading: dict[str, Any] = {"filters": filters, "user": reader.user, "groups": reader.groups, "history": history}
        turn = recorder_for(engine).turn(question, surface="serve", reader=reader, history=history, id=completion_id())
        if not data.get("stream"):
            try:
                answer = await _unless_gone(request, engine.aask(question, **reading))
            except _ClientGone:
                return Response(status_code=499)
            except Exception as exc:
                await turn.failed(exc)
                return engine_error(exc)
            metrics.answered(answer)
            await turn.answered(answer)  # logged before the client has the id it may rate
            return chat_completion(answer, model=model_id, cid=turn.id)
        stream = engine.astream_ask(question, **reading)
        try:
            # a busy queue or a dead model is an HTTP error, not a broken stream; a client that hangs up while its
            # question waits for the model leaves the queue
            first = await _unless_gone(request, anext(stream))
        except _ClientGone:
            await stream.aclose()
            return Response(status_code=499)
        except Exception as exc:
            await stream.aclose()
            await turn.failed(exc)
            return engine_error(exc)
        return StreamingResponse(
            _events(stream, first, model_id, metrics, turn),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    if engine.settings.mcp.serve:  # MCP at /mcp, behind the same key check (ragidx.integrations.mcp_server)
        from ragidx.integrations.mcp_server import mount_mcp

        mount_mcp(app, engine)
    return app


_ROUTES = frozenset({"/health", "/metrics", "/v1/models", "/v1/search", "/v1/chat/completions", "/mcp"})


_READER = "ragidx_reader"
_KEY = "ragidx_key"
_QUESTION = "ragidx_question"


def _reader(request: Request) -> Principal:
    """Who ``request`` reads as (set by :class:`_Guard` from its key; the public reader without keys)."""
    reader = request.scope.get("state", {}).get(_READER)
    if not isinstance(reader, Principal):  # never reached through _Guard: refuse rather than read as anyone
        raise RuntimeError("the request passed no key check")
    return reader


class _Guard:
    """ASGI middleware: answers a request ``admission`` refuses; passes the others on with the reader it admitted
    them as (:func:`_reader`); counts every response and writes its access-log line (:func:`_log_access`)."""

    def __init__(self, app: ASGIApp, *, admission: Callable[[Request], Response | Principal], counter: Counter) -> None:
        self.app = app
        self.admission = admission
        self.counter = counter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        route = path if path in _ROUTES else "other"
        started = time.perf_counter()
        admitted = self.admission(Request(scope))
        if isinstance(admitted, Response):
            self.counter.labels(route, str(admitted.status_code)).inc()
            try:
                await admitted(scope, receive, send)
            finally:
                _log_access(scope, route, admitted.status_code, time.perf_counter() - started)
            return
        scope.setdefault("state", {})[_READER] = admitted
        status = 500  # what the client gets when the app fails before it answers

        async def counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                self.counter.labels(route, str(status)).inc()
            await send(message)

        try:
            await self.app(scope, receive, counted)
        finally:
            _log_access(scope, route, status, time.perf_counter() - started)


def _log_access(scope: Scope, route: str, status: int, seconds: float) -> None:
    """One line on ``ragidx.server.access`` for a request that ended: its fields (``method``, ``route``,
    ``status``, ``seconds``, ``key``: the key's entry in the settings, ``reader``; ``question`` only with
    ``serve.log_questions``) in the record's ``ragidx`` attribute, for :mod:`ragidx.server.logs` to write as one
    JSON object; the message says the same for plain handlers. Never the key itself."""
    state = scope.get("state", {})
    reader = state.get(_READER)
    fields: dict[str, Any] = {
        "event": "request",
        "method": scope.get("method", ""),
        "route": route,
        "status": status,
        "seconds": round(seconds, 3),
        "key": state.get(_KEY),
        "reader": str(reader) if isinstance(reader, Principal) else None,
    }
    if _QUESTION in state:
        fields["question"] = state[_QUESTION]
    access_log.info(
        "%s %s %d %.3fs key=%s reader=%s", fields["method"], route, status, seconds, fields["key"], fields["reader"],
        extra={"ragidx": fields},
    )  # fmt: skip


class _ClientGone(Exception):
    pass


async def _unless_gone(request: Request, awaitable: Awaitable[T]) -> T:
    """``awaitable``'s result, unless the client hangs up first: then it is cancelled (the question leaves the
    model queue, or the model stops writing) and :class:`_ClientGone` is raised."""
    task = asyncio.ensure_future(awaitable)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=_DISCONNECT_POLL_S)
            if done:
                return task.result()
            if await request.is_disconnected():
                raise _ClientGone
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


_DISCONNECT_POLL_S = 0.5


def _reader_of(header: str | None, readers: list[tuple[bytes, Principal, str]]) -> tuple[Principal, str] | None:
    """The reader of the key in an ``Authorization: Bearer KEY`` header and the key's entry (``keys[0]``, for
    logs); None: no key, or not one of ours. Every key is compared in constant time, and all of them, so the time
    taken tells nothing about which matched."""
    if not header or not header.lower().startswith("bearer "):
        return None
    given = header[7:].strip().encode()
    found = None
    for key, reader, entry in readers:
        if hmac.compare_digest(given, key):
            found = (reader, entry)
    return found


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _plain(exc: ValueError) -> str:
    """A JSON error's message, without Python's own wording for a number too long to read."""
    text = str(exc)
    return "a number has too many digits" if "integer string conversion" in text else text


def _declared_size(request: Request) -> int:
    try:
        return int(request.headers.get("content-length") or 0)
    except ValueError:
        return 0


def _too_large(limit: int) -> JSONResponse:
    return JSONResponse(
        error_body(f"the request body is larger than {limit} bytes (serve.max_request_bytes)",
                   kind="invalid_request_error", code="request_too_large"),
        status_code=413,
    )  # fmt: skip


def _model_state(engine: Engine) -> str:
    """``running``, ``stopped`` (started once, not running now: the next question starts it), ``not started``
    or ``remote``."""
    endpoint = engine.settings.llm
    if not endpoint.is_local:
        return "remote"
    local_server = getattr(engine._llm_provider, "local_server", None)
    if local_server is None:
        return "not started"
    server = local_server(endpoint)
    if server.running:
        return "running"
    return "stopped" if server.port is not None else "not started"


async def _events(
    stream: AsyncGenerator[Any, None], first: Any, model: str, metrics: _Metrics, turn: Turn
) -> AsyncIterator[str]:
    """The answer as server-sent events: its text as it can be shown (``Engine.astream_ask`` lets through only text
    the answer keeps, so a client that shows deltas never shows words that are later withdrawn), then the Sources
    block, the closing chunk with ``ragidx``, ``[DONE]``. A client that goes away closes ``stream``: the engine
    stops the model and frees the queue's place. The turn is logged before its closing chunk (``turn.id`` is the
    completion's id)."""
    cid = turn.id

    def event(chunk: dict[str, Any]) -> str:
        return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"

    try:
        yield event(chat_chunk(cid, model, role=True, content=""))
        item = first
        while True:
            if isinstance(item, str):
                yield event(chat_chunk(cid, model, content=item))
            else:
                answer = item
                metrics.answered(answer)
                await turn.answered(answer)
                if sources := sources_block(answer):
                    yield event(chat_chunk(cid, model, content=sources))
                yield event(chat_chunk(cid, model, finish=True, answer=answer))
                yield "data: [DONE]\n\n"
                return
            item = await anext(stream)
    except StopAsyncIteration:
        return
    except Exception as exc:  # after the first byte an HTTP status cannot change: an error event, then the end
        busy = isinstance(exc, EngineBusyError)
        metrics.errors.labels("busy" if busy else "stream").inc()
        await turn.failed(exc)
        if busy:  # the queue's own words, written for the caller
            message = str(exc)
        else:  # as for a 500: an id to find the exception in the log, whose text may quote what the server holds
            error_id = uuid.uuid4().hex[:12]
            logger.error("a streamed answer failed (error id %s)", error_id, exc_info=exc)
            message = f"the answer failed while it was written (error id {error_id}): see the server log"
        yield event(error_body(message, kind="server_error", code="stream_error"))
        yield "data: [DONE]\n\n"
    finally:
        await stream.aclose()
