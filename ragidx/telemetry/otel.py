"""What :mod:`ragidx.telemetry` does when tracing is on: the tracer provider and its exporter (``OTEL_*`` variables),
the spans of a turn, of LLM calls and of ragidx's own runs, and the LlamaIndex instrumentation handlers that turn
the retrieval chain's and the context budget's spans and events into OpenTelemetry spans.

Imported only when tracing is switched on: nothing here runs, or is imported, while it is off.

Example:
    >>> from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    >>> from ragidx.telemetry.settings import TracingSettings
    >>> exporter = InMemorySpanExporter()
    >>> tracing = Tracing.install(TracingSettings(enabled=True), exporter=exporter)
    >>> with tracing.span("ragidx.sync", {"source": "docs"}):
    ...     pass
    >>> tracing.shutdown(); [s.name for s in exporter.get_finished_spans()]
    ['ragidx.sync']
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import os
import secrets
import threading
import time
from collections.abc import AsyncGenerator, Awaitable, Iterator, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.span_handlers import BaseSpanHandler
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import Span, Status, StatusCode
from pydantic import PrivateAttr

from ragidx.telemetry import SpanHandle

if TYPE_CHECKING:
    from ragidx.agent.answer import Answer
    from ragidx.stores.access import Principal
    from ragidx.telemetry.settings import TracingSettings

__all__ = ["STAGE_SPANS", "Tracing", "reader_hash"]

logger = logging.getLogger(__name__)

SCOPE = "ragidx"

STAGE_SPANS: Mapping[str, str] = {
    "ArticleRetriever.retrieve": "ragidx.retrieve",
    "ArticleRetriever.aretrieve": "ragidx.retrieve",
    "ArticleRetriever.search": "ragidx.hybrid_search",
    "ArticleRetriever.asearch": "ragidx.hybrid_search",
    "ArticleRetriever.rerank": "ragidx.chunk_rerank",
    "ArticleRetriever.arerank": "ragidx.chunk_rerank",
    "ArticleRetriever.group": "ragidx.group",
    "FlashReranker.arerank_detailed": "ragidx.flash",
    "ContextBudget.afit": "ragidx.budget",
    "TurnCalls.answer_check": "ragidx.answer_check",
}
"""LlamaIndex instrumentation spans (``Class.method``) traced, and the name of their OpenTelemetry span."""


def reader_hash(reader: Principal, key: bytes) -> str:
    """The reader as a span may hold it: HMAC-SHA256 under ``key`` of its user and groups, 16 hex digits (the public
    reader hashes too, so it is told apart without being named).

    Example:
        >>> from ragidx.stores.access import Principal
        >>> reader_hash(Principal(user="ann"), b"k") == reader_hash(Principal.of("ann", []), b"k")
        True
    """
    return hmac.new(key, "\n".join(sorted(reader.principals)).encode(), hashlib.sha256).hexdigest()[:16]


class _Handle(SpanHandle):
    """A recording span's handle (:class:`ragidx.telemetry.SpanHandle`)."""

    def __init__(self, span: Span, prefix: str = "") -> None:
        self.span = span
        self.prefix = prefix
        self.started = time.perf_counter()
        self.first_s: float | None = None

    def set(self, key: str, value: Any) -> None:
        if value is not None:
            self.span.set_attribute(key, _attribute(value))

    def counts(self, values: Mapping[str, Any]) -> None:
        for key, value in values.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                self.span.set_attribute(f"{self.prefix}.{key}", value)

    def answered(self, answer: Answer) -> None:
        span = self.span
        span.set_attribute("ragidx.not_found", bool(answer.not_found))
        if answer.not_found_reason:
            span.set_attribute("ragidx.not_found_reason", answer.not_found_reason)
        span.set_attribute("ragidx.citations", len(answer.citations))
        span.set_attribute("ragidx.sources", len(answer.articles))
        span.set_attribute("ragidx.searches", len(answer.queries))
        span.set_attribute("ragidx.citation_method", answer.citation_method)
        if answer.model:
            span.set_attribute("gen_ai.request.model", answer.model)
        if answer.answer_check is not None:
            span.set_attribute("ragidx.answer_check.log_odds", float(answer.answer_check))
        fired = [str(g.get("name") or g.get("guard") or "") for g in answer.guards]
        span.set_attribute("ragidx.guards_fired", [f for f in fired if f])
        for guard in answer.guards:  # what each guard decided, by name and kind (no answer text)
            span.add_event(
                "ragidx.guard", {k: str(v) for k, v in guard.items() if k in ("name", "guard", "kind", "action")}
            )
        for key, seconds in answer.timings.items():
            span.set_attribute(f"ragidx.timings.{key}_s", float(seconds))
        tokens = answer.tokens
        if isinstance(tokens.get("prompt_total"), int):
            span.set_attribute("gen_ai.usage.input_tokens", tokens["prompt_total"])
        if isinstance(tokens.get("completion"), int):
            span.set_attribute("gen_ai.usage.output_tokens", tokens["completion"])

    def first_token(self) -> None:
        if self.first_s is None:
            self.first_s = time.perf_counter() - self.started
            self.span.set_attribute("gen_ai.response.time_to_first_chunk", self.first_s)
            self.span.add_event("gen_ai.first_token")

    def response(self, response: Any = None, *, chunks: int = 0) -> None:
        usage = _usage(response)
        prompt = usage.get("input")
        if prompt is None:  # the endpoint sent none: the budget's count of the prompt as sent (its tokenizer's)
            prompt = _BUDGET_TOKENS.get()
            if prompt is not None:
                self.span.set_attribute("ragidx.usage.input_tokens_source", "budget")
        if prompt is not None:
            self.span.set_attribute("gen_ai.usage.input_tokens", int(prompt))
        output = usage.get("output")
        if output is None and chunks:  # one streamed piece is one token on llama.cpp's and OpenAI's servers
            output = chunks
            self.span.set_attribute("ragidx.usage.output_tokens_source", "streamed_pieces")
        if output is not None:
            self.span.set_attribute("gen_ai.usage.output_tokens", int(output))
        if reason := usage.get("finish"):
            self.span.set_attribute("gen_ai.response.finish_reasons", [str(reason)])


_BUDGET_TOKENS: ContextVar[int | None] = ContextVar("ragidx_budget_tokens", default=None)
"""The last budget's prompt tokens in this task: an LLM call's input tokens when its endpoint reports none (the
budget runs just before each call, in the same step of the turn)."""


class Tracing:
    """The installed tracer provider and the LlamaIndex handlers feeding it (one per process)."""

    def __init__(self, provider: TracerProvider, settings: TracingSettings, handlers: tuple[Any, Any]) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer(SCOPE)
        self.settings = settings
        self.key = settings.reader_key.get_secret_value().encode() if settings.reader_key else secrets.token_bytes(32)
        self.handlers = handlers

    @classmethod
    def install(cls, settings: TracingSettings, *, exporter: SpanExporter | None = None) -> Tracing:
        """A tracer provider of its own (not the global one: an application's own stays as it is) exporting to
        ``exporter``, or to what ``OTEL_TRACES_EXPORTER`` names (``otlp`` over HTTP by default); LlamaIndex's root
        dispatcher gets the span and event handlers."""
        attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "ragidx"}
        provider = TracerProvider(resource=Resource.create(attributes))
        processor = SimpleSpanProcessor(exporter) if exporter is not None else _configured_processor()
        if processor is not None:
            provider.add_span_processor(processor)
        tracer = provider.get_tracer(SCOPE)
        span_handler = _StageSpans.of(tracer, record_queries=settings.record_questions)
        event_handler = _StageEvents()
        root = get_dispatcher()
        root.add_span_handler(span_handler)
        root.add_event_handler(event_handler)
        return cls(provider, settings, (span_handler, event_handler))

    def shutdown(self) -> None:
        root = get_dispatcher()
        span_handler, event_handler = self.handlers
        with contextlib.suppress(ValueError):
            root.span_handlers.remove(span_handler)
        with contextlib.suppress(ValueError):
            root.event_handlers.remove(event_handler)
        self.provider.shutdown()

    async def traced_ask(
        self, question: str, reader: Principal, session_id: str | None, asked: Awaitable[Answer]
    ) -> Answer:
        """``asked`` (a turn) awaited under a ``ragidx.ask`` span, current meanwhile in this task only."""
        with self._turn(question, reader, session_id) as handle:
            token = otel_context.attach(trace.set_span_in_context(handle.span))
            try:
                answer = await asked
            finally:
                otel_context.detach(token)
            handle.answered(answer)
            return answer

    async def traced_stream(
        self, question: str, reader: Principal, session_id: str | None, stream: AsyncGenerator[Any, None]
    ) -> AsyncGenerator[Any, None]:
        """``stream``'s items under a ``ragidx.ask`` span, current while ``stream`` runs, not while its consumer
        does; the closing ``Answer`` is recorded on the span. A consumer that stops closes ``stream``."""
        from ragidx.agent.answer import Answer

        with self._turn(question, reader, session_id) as handle:
            try:
                while True:
                    token = otel_context.attach(trace.set_span_in_context(handle.span))
                    try:
                        item = await anext(stream)
                    except StopAsyncIteration:
                        return
                    finally:
                        otel_context.detach(token)
                    if isinstance(item, Answer):
                        handle.answered(item)
                    yield item
            finally:
                await stream.aclose()

    @contextlib.contextmanager
    def _turn(self, question: str, reader: Principal, session_id: str | None) -> Iterator[_Handle]:
        span = self.tracer.start_span("ragidx.ask", kind=trace.SpanKind.SERVER)
        span.set_attribute("ragidx.reader.hash", reader_hash(reader, self.key))
        span.set_attribute("ragidx.reader.public", reader.is_public)
        if session_id:
            session = hmac.new(self.key, session_id.encode(), hashlib.sha256).hexdigest()[:16]
            span.set_attribute("ragidx.session.hash", session)
        span.set_attribute("ragidx.question.chars", len(question))
        if self.settings.record_questions:
            span.set_attribute("ragidx.question", question)
        try:
            yield _Handle(span)
        except (GeneratorExit, asyncio.CancelledError):  # the caller stopped reading: not the turn's failure
            span.set_attribute("ragidx.cancelled", True)
            raise
        except BaseException as exc:
            _failed(span, exc)
            raise
        finally:
            span.end()

    @contextlib.contextmanager
    def span(self, name: str, attributes: Mapping[str, Any]) -> Iterator[SpanHandle]:
        with self.tracer.start_as_current_span(name, record_exception=False, set_status_on_exception=False) as span:
            handle = _Handle(span, prefix=name)
            for key, value in attributes.items():
                handle.set(f"{name}.{key}", value)
            try:
                yield handle
            except BaseException as exc:
                _failed(span, exc)
                raise

    @contextlib.contextmanager
    def llm_call(self, llm: Any, *, stream: bool, options: Mapping[str, Any]) -> Iterator[SpanHandle]:
        model = _model_name(llm)
        with self.tracer.start_as_current_span(
            f"chat {model}" if model else "chat",
            kind=trace.SpanKind.CLIENT,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            span.set_attribute("gen_ai.operation.name", "chat")
            span.set_attribute("gen_ai.provider.name", _provider(llm))
            if model:
                span.set_attribute("gen_ai.request.model", model)
            for option, attribute in (("temperature", "gen_ai.request.temperature"),
                                      ("max_tokens", "gen_ai.request.max_tokens")):  # fmt: skip
                value = options.get(option, getattr(llm, option, None))
                if isinstance(value, int | float) and not isinstance(value, bool):
                    span.set_attribute(attribute, value)
            span.set_attribute("ragidx.llm.stream", stream)
            handle = _Handle(span)
            try:
                yield handle
            except BaseException as exc:
                _failed(span, exc)
                raise


def _configured_processor() -> SpanProcessor | None:
    """The span processor ``OTEL_TRACES_EXPORTER`` asks for: ``otlp`` (default; HTTP/protobuf, endpoint, headers
    and timeout from the ``OTEL_EXPORTER_OTLP_*`` variables), ``console``, or ``none``."""
    names = [n.strip().lower() for n in os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()]
    exporters: list[SpanExporter] = []
    for name in names:
        if name == "none":
            continue
        if name == "console":
            exporters.append(ConsoleSpanExporter())
        elif name == "otlp":
            protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
                "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
            )
            if protocol.strip() != "http/protobuf":
                logger.warning("OTEL_EXPORTER_OTLP_PROTOCOL=%s: ragidx exports over http/protobuf", protocol)
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporters.append(OTLPSpanExporter())
        else:
            logger.warning("OTEL_TRACES_EXPORTER names %r, which ragidx does not know: use otlp, console or none", name)
    if not exporters:
        return None
    if len(exporters) == 1:
        return BatchSpanProcessor(exporters[0])
    from opentelemetry.sdk.trace import SynchronousMultiSpanProcessor

    multi = SynchronousMultiSpanProcessor()
    for exporter in exporters:
        multi.add_span_processor(BatchSpanProcessor(exporter))
    return multi


class _StageSpans(BaseSpanHandler[Any]):
    """LlamaIndex spans of the retrieval chain, flash, the budget and the answer check (:data:`STAGE_SPANS`) as
    OpenTelemetry spans, current while they run so what they call (a model call, a nested stage) is their child."""

    _tracer: Any = PrivateAttr(default=None)
    _record_queries: bool = PrivateAttr(default=False)
    _open: dict[str, tuple[Span, object]] = PrivateAttr(default_factory=dict)
    _guard: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @classmethod
    def of(cls, tracer: Any, *, record_queries: bool) -> _StageSpans:
        handler = cls()
        handler._tracer = tracer
        handler._record_queries = record_queries
        return handler

    @classmethod
    def class_name(cls) -> str:
        return "RagidxOtelSpans"

    def span_enter(self, id_: str, bound_args: Any, instance: Any = None, parent_id: str | None = None,
                   tags: dict[str, Any] | None = None, **kwargs: Any) -> None:  # fmt: skip
        name = STAGE_SPANS.get(id_.partition("-")[0])
        if name is None:
            return
        span = self._tracer.start_span(name)
        arguments = getattr(bound_args, "arguments", {}) or {}
        top_k = arguments.get("top_k")
        if isinstance(top_k, int):
            span.set_attribute("ragidx.top_k", top_k)
        chunks = arguments.get("chunks")
        if isinstance(chunks, list):
            span.set_attribute("ragidx.chunks_in", len(chunks))
        if self._record_queries and isinstance(arguments.get("query"), str):
            span.set_attribute("ragidx.query", arguments["query"])
        token = otel_context.attach(trace.set_span_in_context(span))
        with self._guard:
            self._open[id_] = (span, token)

    def span_exit(self, id_: str, bound_args: Any, instance: Any = None, result: Any = None, **kwargs: Any) -> None:
        self._close(id_, result=result)

    def span_drop(self, id_: str, bound_args: Any, instance: Any = None, err: BaseException | None = None,
                  **kwargs: Any) -> None:  # fmt: skip
        self._close(id_, err=err)

    def _close(self, id_: str, *, result: Any = None, err: BaseException | None = None) -> None:
        with self._guard:
            opened = self._open.pop(id_, None)
        if opened is None:
            return
        span, token = opened
        count = _count(result)
        if count is not None:
            span.set_attribute("ragidx.results", count)
        if err is not None:
            _failed(span, err)
        with contextlib.suppress(ValueError):  # a context reset elsewhere (another task) cannot be undone here
            otel_context.detach(token)  # type: ignore[arg-type]
        span.end()

    # the abstract hooks of BaseSpanHandler: this handler keeps no LlamaIndex span objects of its own
    def new_span(self, *args: Any, **kwargs: Any) -> None:
        return None

    def prepare_to_exit_span(self, *args: Any, **kwargs: Any) -> None:
        return None

    def prepare_to_drop_span(self, *args: Any, **kwargs: Any) -> None:
        return None


class _StageEvents(BaseEventHandler):
    """The context budget's report (``ContextBudgetEvent``) on the budget's span; the grouping's and reranks'
    events as counts on theirs."""

    @classmethod
    def class_name(cls) -> str:
        return "RagidxOtelEvents"

    def handle(self, event: BaseEvent, **kwargs: Any) -> Any:
        name = event.class_name()
        span = trace.get_current_span()
        if name == "ContextBudgetEvent":
            report = event.report  # type: ignore[attr-defined]
            _BUDGET_TOKENS.set(int(report.tokens_after))
            if not span.is_recording() or getattr(span, "name", "") != "ragidx.budget":
                # a budget outside ContextBudget.afit (BudgetedLLM): a span of its own, as long as the run took
                start = time.time_ns() - int(report.duration_ms * 1e6)
                tracer = trace.get_tracer_provider().get_tracer(SCOPE) if not span.is_recording() else None
                span = (tracer or _tracer_of(span)).start_span("ragidx.budget", start_time=start)
                _budget_attributes(span, report)
                span.end()
                return
            _budget_attributes(span, report)
        elif name == "ArticlesGroupedEvent" and span.is_recording():
            span.set_attribute("ragidx.chunks_in", int(event.chunk_count))  # type: ignore[attr-defined]
            span.set_attribute("ragidx.articles", len(event.kb_ids))  # type: ignore[attr-defined]


def _tracer_of(span: Any) -> Any:
    from ragidx import telemetry

    tracing = telemetry._tracing
    return tracing.tracer if tracing is not None else trace.get_tracer(SCOPE)


def _budget_attributes(span: Any, report: Any) -> None:
    statuses = [a.status for a in report.articles]
    values: dict[str, Any] = {
        "ragidx.budget.context_window": report.context_window,
        "ragidx.budget.tokens_before": report.tokens_before,
        "ragidx.budget.tokens_after": report.tokens_after,
        "ragidx.budget.article_tokens_before": report.article_tokens_before,
        "ragidx.budget.article_tokens_after": report.article_tokens_after,
        "ragidx.budget.articles_kept": statuses.count("kept"),
        "ragidx.budget.articles_compressed": statuses.count("compressed"),
        "ragidx.budget.articles_truncated": statuses.count("truncated"),
        "ragidx.budget.articles_dropped": statuses.count("dropped"),
        "ragidx.budget.path": list(report.path),
        "ragidx.budget.compressor": report.compressor,
        "ragidx.budget.fallback_recommended": bool(report.fallback_recommended),
    }
    for key, value in values.items():
        span.set_attribute(key, value)


def _count(result: Any) -> int | None:
    if isinstance(result, list | tuple):
        return len(result)
    nodes = getattr(result, "nodes", None)
    return len(nodes) if isinstance(nodes, list) else None


def _failed(span: Span, exc: BaseException) -> None:
    """An error's type on its span, never its text (it may quote SQL, paths, a reader)."""
    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
    span.set_attribute("error.type", type(exc).__qualname__)


def _model_name(llm: Any) -> str:
    for attr in ("model", "model_name"):
        value = getattr(llm, attr, None)
        if isinstance(value, str) and value:
            return value
    with contextlib.suppress(Exception):
        name = llm.metadata.model_name
        if isinstance(name, str):
            return name
    return ""


def _provider(llm: Any) -> str:
    with contextlib.suppress(Exception):
        return str(llm.class_name())
    return type(llm).__name__


def _usage(response: Any) -> dict[str, Any]:
    """Input and output tokens and the finish reason as the endpoint reported them (OpenAI's ``usage``, as
    LlamaIndex's OpenAI client copies it into ``additional_kwargs`` or keeps it in ``raw``)."""
    if response is None:
        return {}
    out: dict[str, Any] = {}
    extra = getattr(response, "additional_kwargs", None) or {}
    raw = getattr(response, "raw", None)
    usage = _get(raw, "usage")
    for key, names in (
        ("input", ("prompt_tokens", "input_tokens")),
        ("output", ("completion_tokens", "output_tokens")),
    ):
        for name in names:
            value = extra.get(name) if isinstance(extra, Mapping) else None
            if value is None and usage is not None:
                value = _get(usage, name)
            if isinstance(value, int):
                out[key] = value
                break
    choices = _get(raw, "choices")
    if isinstance(choices, list) and choices:
        reason = _get(choices[0], "finish_reason")
        if reason:
            out["finish"] = reason
    return out


def _get(value: Any, name: str) -> Any:
    if value is None:
        return None
    if isinstance(value, Mapping):
        return value.get(name)
    return getattr(value, name, None)


def _attribute(value: Any) -> Any:
    if isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, list | tuple):
        return [v if isinstance(v, str | bool | int | float) else str(v) for v in value]
    return str(value)
