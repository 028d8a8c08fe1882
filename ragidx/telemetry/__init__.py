"""OpenTelemetry traces of ragidx: a span per question and its parts, per ingest and per sync run.

Off by default (``tracing.enabled``); while off, every hook here is a check of one module variable and the
OpenTelemetry SDK is never imported. On, :func:`configure` (called by every ``Engine``) installs a tracer provider
exporting as the standard ``OTEL_*`` variables say (``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_EXPORTER``: ``otlp`` (HTTP/protobuf, the default), ``console`` or
``none``; ``OTEL_SDK_DISABLED=true`` keeps it off) and hooks LlamaIndex's instrumentation, which ragidx's
retrieval chain and context budget already report to. A question's trace::

    ragidx.ask                       reader (keyed hash), session, outcome, citations, guards fired, answer check
    ├── ragidx.retrieve              one per search of the turn
    │   ├── ragidx.hybrid_search     chunks found
    │   ├── ragidx.chunk_rerank      chunks kept
    │   ├── ragidx.group             whole articles
    │   └── ragidx.flash             (flash on) the articles the LLM kept
    ├── ragidx.budget                tokens before/after, articles kept/compressed/truncated/dropped
    ├── ragidx.answer_check          (the local model) the one-token YES/NO check
    └── chat MODEL                   each model call: GenAI conventions (gen_ai.request.model,
                                     gen_ai.usage.input_tokens / output_tokens, time to first token)

The question's text and search queries are recorded only with ``tracing.record_questions``; article titles,
ids and texts never.

Example:
    >>> from ragidx.telemetry.settings import TracingSettings
    >>> configure(TracingSettings())   # off: nothing installed, nothing imported
    False
    >>> with span("ragidx.sync", source="docs") as s:
    ...     s.set("ragidx.sync.new", 3)   # a no-op while off
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

if TYPE_CHECKING:
    from ragidx.agent.answer import Answer
    from ragidx.telemetry.otel import Tracing
    from ragidx.telemetry.settings import TracingSettings

__all__ = ["SpanHandle", "configure", "enabled", "llm_call", "shutdown", "span", "traced_stream", "traced_turn"]

F = TypeVar("F", bound=Callable[..., Any])

_tracing: Tracing | None = None
"""The installed tracing (None: off). Set once per process by :func:`configure`."""


def sdk_disabled() -> bool:
    """``OTEL_SDK_DISABLED`` says off (``true``, case-insensitive, as the specification reads it)."""
    return os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def configure(settings: TracingSettings, *, exporter: Any = None) -> bool:
    """Install tracing for this process when ``settings.enabled`` (and ``OTEL_SDK_DISABLED`` is not true); returns
    whether tracing is on. Idempotent: the first enabled configuration wins (one tracer provider per process) until
    :func:`shutdown`. ``exporter``: an OpenTelemetry ``SpanExporter`` to send spans to instead of what the
    ``OTEL_*`` variables say (tests: the SDK's ``InMemorySpanExporter``)."""
    global _tracing
    if _tracing is not None:
        return True
    if not settings.enabled or sdk_disabled():
        return False
    from ragidx.telemetry.otel import Tracing

    _tracing = Tracing.install(settings, exporter=exporter)
    return True


def enabled() -> bool:
    """Whether spans are being recorded in this process."""
    return _tracing is not None


def shutdown() -> None:
    """Export what is buffered and stop tracing (tests; a process that ends flushes by itself)."""
    global _tracing
    if _tracing is not None:
        _tracing.shutdown()
        _tracing = None


class SpanHandle:
    """What a caller may write on its span; every method is a no-op while tracing is off.

    Example:
        >>> SpanHandle().set("ragidx.ingest.new", 2)
    """

    def set(self, key: str, value: Any) -> None:
        """Set an attribute (None values are left out)."""

    def counts(self, values: Mapping[str, Any]) -> None:
        """The numbers among ``values`` (a report's ``as_dict()``) as attributes named after the span
        (``new`` on ``ragidx.ingest`` is ``ragidx.ingest.new``); text, lists and ids are left out."""

    def answered(self, answer: Answer) -> None:
        """A turn's outcome: not found and why, citations, sources, guards that fired, the answer check."""

    def first_token(self) -> None:
        """An LLM call's first streamed piece arrived (time to first token)."""

    def response(self, response: Any = None, *, chunks: int = 0) -> None:
        """An LLM call's reply: its usage (input and output tokens) and finish reason when the endpoint sent them."""


_NOOP = SpanHandle()


def traced_turn(method: F) -> F:
    """Trace each call of ``method`` (``EngineSessions.ask``: ``(self, question, session_id, scope, ...)`` -> an
    ``Answer``) as a ``ragidx.ask`` span, current while the turn runs so its searches, budget and model calls are
    its children. Off: one check, then the method itself."""

    @functools.wraps(method)
    async def ask(self: Any, question: str, session_id: str | None, scope: Any, *args: Any, **kwargs: Any) -> Any:
        asked = method(self, question, session_id, scope, *args, **kwargs)
        if _tracing is None:
            return await asked
        return await _tracing.traced_ask(question, scope.principal, session_id, asked)

    return cast(F, ask)


def traced_stream(method: F) -> F:
    """:func:`traced_turn` for a streamed turn (``EngineSessions.astream``, an async generator ending with the
    ``Answer``): the span is current only while the turn's own code runs, never in the consumer's between items."""

    @functools.wraps(method)
    def astream(self: Any, question: str, session_id: str | None, scope: Any, *args: Any, **kwargs: Any) -> Any:
        stream = method(self, question, session_id, scope, *args, **kwargs)
        if _tracing is None:
            return stream
        return _tracing.traced_stream(question, scope.principal, session_id, stream)

    return cast(F, astream)


@contextlib.contextmanager
def span(name: str, **attributes: Any) -> Iterator[SpanHandle]:
    """A span of ragidx's own (``ragidx.ingest``, ``ragidx.sync``), current while the block runs; ``attributes``
    are set with the ``ragidx.`` prefix of the span's name (``source="docs"`` on ``ragidx.sync`` is
    ``ragidx.sync.source``)."""
    if _tracing is None:
        yield _NOOP
        return
    with _tracing.span(name, attributes) as handle:
        yield handle


@contextlib.contextmanager
def llm_call(llm: Any, *, stream: bool, options: dict[str, Any] | None = None) -> Iterator[SpanHandle]:
    """The span of one model call (``chat MODEL``, GenAI semantic conventions), current while the block runs."""
    if _tracing is None:
        yield _NOOP
        return
    with _tracing.llm_call(llm, stream=stream, options=options or {}) as handle:
        yield handle
