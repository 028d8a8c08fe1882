"""The one place ragidx calls a chat model: retries, errors, the endpoint's overflow answer, usage, transport.

``ChatCaller`` wraps any LlamaIndex LLM for the agent and the flash reranker:

- **Retries** of endpoint trouble (down, timeout, 429, 5xx) with exponential backoff, through tenacity;
  then ``LLMUnavailableError``. A refusal (bad key, bad model, bad request) is not retried:
  ``LLMRequestError``; other exceptions (bugs) pass through unchanged.
- **The endpoint's "context length exceeded" answer** becomes ``ContextOverflowError`` with the
  endpoint's own prompt count when its message gives one: the last resort behind the context budget.
- **Usage**: :func:`usage` reads the endpoint's token counts from a response (``None`` when absent).
- **Inline transport**: :func:`to_inline` writes tool calls and results as plain assistant / user text,
  for chat templates that drop ``tool`` messages (llama-cpp-python's ``chatml-function-calling``).

Example:
    >>> caller = ChatCaller(llm, retries=3, max_output_tokens=512)  # doctest: +SKIP
    >>> response = await caller.achat(messages, tools=[tool], tool_choice="auto")  # doctest: +SKIP
    >>> usage(response)  # doctest: +SKIP
    {'prompt_tokens': 812, 'completion_tokens': 40}
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar

import httpx
from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole, ToolCallBlock
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)
from tenacity.stop import stop_base

from ragidx import telemetry

__all__ = [
    "ChatCaller",
    "ContextOverflowError",
    "LLMRequestError",
    "LLMUnavailableError",
    "capped",
    "endpoint_name",
    "model_name",
    "to_inline",
    "usage",
]

logger = logging.getLogger(__name__)
T = TypeVar("T")


class LLMUnavailableError(RuntimeError):
    """The LLM endpoint failed after its retries (down, timing out, rate-limited).

    ``timed_out`` is true when the last attempt timed out.
    """

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class LLMRequestError(RuntimeError):
    """The LLM endpoint refused the request (bad key, bad model name, bad request): retrying won't help."""


class ContextOverflowError(LLMRequestError):
    """The endpoint counted more prompt tokens than the window holds (its tokenizer or template differs).

    ``prompt_tokens`` is the endpoint's own count of the prompt, when its message gave one.
    """

    def __init__(self, message: str, prompt_tokens: int | None) -> None:
        super().__init__(message)
        self.prompt_tokens = prompt_tokens


_OVERFLOW = (
    # llama-cpp-python: "Requested tokens (4116) exceed context window of 4096" (prompt + max_tokens)
    re.compile(r"Requested tokens \((\d+)\) exceed context window of (\d+)"),
    # OpenAI-style: "maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens"
    re.compile(r"maximum context length is (\d+) tokens.*?resulted in (\d+) tokens", re.S),
)


def overflow_prompt_tokens(exc: BaseException, max_output_tokens: int) -> tuple[bool, int | None]:
    """(is a context-length refusal, the endpoint's prompt token count if the message says it)."""
    text = str(exc)
    m = _OVERFLOW[0].search(text)
    if m:
        return True, max(1, int(m.group(1)) - max_output_tokens)
    m = _OVERFLOW[1].search(text)
    if m:
        return True, int(m.group(2))
    lowered = text.lower()
    return ("context length" in lowered or "context window" in lowered), None


def error_kind(exc: BaseException) -> Literal["retry", "fatal", "bug"]:
    """``retry`` for endpoint trouble (down, timeout, 429, 5xx), ``fatal`` for refusals, ``bug`` otherwise."""
    try:
        import openai
    except ImportError:  # pragma: no cover - openai comes with llama-index-llms-openai
        openai = None  # type: ignore[assignment]
    if openai is not None:
        if isinstance(
            exc, (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError, openai.InternalServerError)
        ):
            return "retry"
        if isinstance(exc, openai.APIStatusError):
            return "retry" if exc.status_code >= 500 or exc.status_code == 429 else "fatal"
    if isinstance(exc, (ConnectionError, TimeoutError, asyncio.TimeoutError, httpx.TransportError)):
        # httpx's own errors reach here unwrapped from a stream's body (a server killed mid-reply)
        return "retry"
    return "bug"


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes, outermost first (``__cause__``, else ``__context__``)."""
    out: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in out:
        out.append(seen)
        seen = seen.__cause__ or seen.__context__
    return out


def unavailable_reason(exc: BaseException, llm: Any) -> tuple[str, str]:
    """(what went wrong with the endpoint, in a few words; what to do about it) for a ``retry`` kind error.

    The words come from the whole cause chain: the OpenAI client reports "Connection error." and "Request timed
    out." over the socket's own error ("Connection refused"), which is the one that tells the user what to fix.

    Example:
        >>> try:
        ...     try:
        ...         raise ConnectionRefusedError(111, "Connection refused")
        ...     except OSError as exc:
        ...         raise ConnectionError("Connection error.") from exc
        ... except ConnectionError as outer:
        ...     unavailable_reason(outer, None)[0]
        'connection refused'
    """
    chain = _chain(exc)
    names = {type(e).__name__ for e in chain}
    connect_s = getattr(llm, "connect_timeout", None)
    read_s = getattr(llm, "read_timeout", None)
    reachable = "Check that the server runs and listens at that address (RAGIDX_LLM__API_BASE for the main model)"
    local = "; for the local model, see the server log in the model cache folder"
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return "connection refused", f"{reachable}{local}."
    if "ConnectTimeout" in names:
        within = f" within {connect_s:g} s" if connect_s else ""
        return (
            f"no connection{within} (connect_timeout_s)",
            f"{reachable}, and that no firewall drops the traffic.",
        )
    if "ReadTimeout" in names or "APITimeoutError" in names or any(isinstance(e, TimeoutError) for e in chain):
        within = f" within {read_s:g} s" if read_s else ""
        return (
            f"it took the connection but sent no reply{within} (read_timeout_s)",
            "Check that the server is not stuck or overloaded; for a model that is slow to start its reply, raise "
            "read_timeout_s (RAGIDX_LLM__READ_TIMEOUT_S for the main model).",
        )
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return f"HTTP {status} ({exc})", _status_advice(status)
    inner = next((e for e in reversed(chain) if str(e) and not isinstance(e, asyncio.CancelledError)), exc)
    return f"{type(inner).__name__}: {inner}", f"{reachable}{local}."


def _status_advice(status: int) -> str:
    """What to do about an HTTP status that ``error_kind`` retries (429 and 5xx)."""
    if status == 429:
        return "The endpoint limits how often it may be asked (rate limit): wait a minute, or raise the limit."
    if status in (502, 503, 504):
        return "The endpoint or a proxy in front of it is overloaded or restarting: try again later."
    return (
        "The server failed on this request: its log says why (a message format it does not accept, a crashed "
        "model); the same request retried later may fail the same way."
    )


def _choices(chunk: Any) -> Any:
    raw = getattr(chunk, "raw", None)
    return raw.get("choices") if isinstance(raw, dict) else getattr(raw, "choices", None)


def _has_choices(chunk: Any) -> bool:
    """Whether a streamed chunk is an OpenAI chunk with choices (a fake model's carry none)."""
    return bool(_choices(chunk))


def _finish_reason(chunk: Any) -> str | None:
    """The OpenAI finish reason a streamed chunk carries (``None``: none yet)."""
    choices = _choices(chunk)
    if not choices:
        return None
    first = choices[0]
    reason = first.get("finish_reason") if isinstance(first, dict) else getattr(first, "finish_reason", None)
    return str(reason) if reason else None


def _timed_out(exc: BaseException) -> bool:
    return isinstance(exc, TimeoutError) or "timeout" in type(exc).__name__.lower()


def usage(response: Any) -> dict[str, int] | None:
    """``{"prompt_tokens", "completion_tokens"}`` from a response's OpenAI-style usage (object or dict)."""
    raw = getattr(response, "raw", None)
    if raw is None:
        return None
    found = raw.get("usage") if isinstance(raw, dict) else getattr(raw, "usage", None)
    if found is None:
        return None

    def get(*keys: str) -> int | None:
        for key in keys:
            value = found.get(key) if isinstance(found, dict) else getattr(found, key, None)
            if isinstance(value, int | float) and not isinstance(value, bool):
                return int(value)
        return None

    prompt = get("prompt_tokens", "input_tokens")
    completion = get("completion_tokens", "output_tokens")
    if prompt is None and completion is None:
        return None
    return {"prompt_tokens": prompt or 0, "completion_tokens": completion or 0}


def capped(llm: Any, max_tokens: int) -> Any:
    """``llm`` with its replies cut at ``max_tokens`` tokens, for a short call (a probe, a warm-up).

    LlamaIndex's OpenAI LLMs send their own ``max_tokens`` over the one a call passes, so
    ``llm.chat(messages, max_tokens=1)`` still lets the model write up to the endpoint's answer reserve.
    A copy with the field changed (the client is shared) does cut; an LLM without the field is returned as
    it is, where the call's own argument is what counts.

    Example:
        >>> from llama_index.llms.openai_like import OpenAILike
        >>> llm = OpenAILike(model="m", api_base="http://127.0.0.1:1/v1", api_key="-", max_tokens=512)
        >>> capped(llm, 1).max_tokens, llm.max_tokens
        (1, 512)
    """
    if getattr(llm, "max_tokens", None) is None or not hasattr(llm, "model_copy"):
        return llm
    return llm.model_copy(update={"max_tokens": max_tokens})


def model_name(llm: Any) -> str:
    """The model's name as the endpoint knows it."""
    try:
        return str(getattr(llm, "model", None) or llm.metadata.model_name)
    except Exception:  # metadata is a property some integrations compute lazily
        return type(llm).__name__


def endpoint_name(llm: Any) -> str:
    base = getattr(llm, "api_base", None)
    return f"{model_name(llm)!r} at {base}" if base else repr(model_name(llm))


def _call_text(block: ToolCallBlock) -> str:
    kwargs = block.tool_kwargs
    return kwargs if isinstance(kwargs, str) else json.dumps(kwargs, ensure_ascii=False)


def to_inline(
    messages: Sequence[ChatMessage], render_result: Callable[[ChatMessage], str] | None = None
) -> list[ChatMessage]:
    """Tool calls and results as plain assistant / user text, for chat templates without tool messages.

    ``render_result`` writes a tool result's body (default: the message's text).

    Example:
        >>> msg = ChatMessage(role=MessageRole.TOOL, content="3 hits", additional_kwargs={"name": "search"})
        >>> to_inline([msg])[0].content
        'Result of search:\\n3 hits'
    """
    out: list[ChatMessage] = []
    for m in messages:
        calls = [b for b in m.blocks if isinstance(b, ToolCallBlock)]
        if calls:
            described = "; ".join(f"{c.tool_name}({_call_text(c)})" for c in calls)
            out.append(ChatMessage(role=MessageRole.ASSISTANT, content=f"Calling {described}"))
        elif m.role == MessageRole.TOOL:
            name = m.additional_kwargs.get("name", "tool")
            body = render_result(m) if render_result is not None else (m.content or "")
            out.append(ChatMessage(role=MessageRole.USER, content=f"Result of {name}:\n{body}"))
        else:
            out.append(m)
    return out


class ChatCaller:
    """Calls one LLM: retries, clear errors, the endpoint's overflow answer, optional inline transport.

    Args:
        llm: any LlamaIndex LLM (``achat`` / ``astream_chat``; ``achat_with_tools`` when tools are passed).
        retries / backoff_s: retries of endpoint trouble, waiting ``backoff_s * 2**n`` seconds.
        max_output_tokens: the reply's reserve (to read llama-cpp's overflow message, which counts it).
        inline_tool_results: send tool traffic as plain text (see :func:`to_inline`).
        retry_window_s: no retry starts once this many seconds have passed since the first try. Default: the
            LLM's ``read_timeout`` when it has one (:class:`~ragidx.providers.llms.EndpointLLM`), so an endpoint
            that takes the connection and never answers fails after one read timeout, not ``retries + 1`` of
            them, while a refused connection is still retried within that window.

    Example:
        >>> text = await ChatCaller(llm).astream(messages, print)  # doctest: +SKIP
    """

    def __init__(
        self,
        llm: Any,
        *,
        retries: int = 2,
        backoff_s: float = 1.0,
        max_output_tokens: int = 0,
        inline_tool_results: bool = False,
        retry_window_s: float | None = None,
    ) -> None:
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self.llm = llm
        self.retries = retries
        self.retry_window_s = retry_window_s if retry_window_s is not None else getattr(llm, "read_timeout", None)
        self.backoff_s = backoff_s
        self.max_output_tokens = max_output_tokens
        self.inline_tool_results = inline_tool_results

    def wire(self, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        """The messages as they are sent."""
        return to_inline(messages) if self.inline_tool_results else list(messages)

    async def achat(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[Any] | None = None,
        timeout: float | None = None,
        **options: Any,
    ) -> ChatResponse:
        """One chat call (with ``tools``: ``achat_with_tools``; ``options`` go to the LLM)."""
        wire = self.wire(messages)

        async def call() -> ChatResponse:
            if tools is None:
                pending = self.llm.achat(wire, **options)
            else:
                pending = self.llm.achat_with_tools(list(tools), chat_history=wire, **options)
            response: ChatResponse = await asyncio.wait_for(pending, timeout=timeout)
            return response

        with telemetry.llm_call(self.llm, stream=False, options=options) as traced:  # off: a no-op
            answered = await self._with_retries(call)
            traced.response(answered)
        return answered

    async def astream(self, messages: Sequence[ChatMessage], on_delta: Callable[[str], None]) -> str:
        """A streamed chat call; ``on_delta`` gets each piece; returns the whole text."""
        wire = self.wire(messages)

        async def call() -> str:
            parts: list[str] = []
            reasons: list[str | None] = []  # of the chunks that came from an OpenAI-style endpoint
            gen = await self.llm.astream_chat(wire)
            async for chunk in gen:
                last[:] = [chunk, len(parts) + bool(chunk.delta)]
                if _has_choices(chunk):
                    reasons.append(_finish_reason(chunk))
                if chunk.delta:
                    traced.first_token()
                    parts.append(chunk.delta)
                    on_delta(chunk.delta)
            if reasons and not any(reasons):
                # An OpenAI stream ends with a finish reason; one without any was cut off (a server that ends
                # the reply for another request, a proxy's timeout). Endpoint trouble, retried: never an
                # empty or half answer passed on as if the model had written it.
                raise ConnectionError(f"the reply stream ended without a finish reason after {len(parts)} pieces")
            return "".join(parts)

        last: list[Any] = [None, 0]  # the last chunk (its usage, when the endpoint sends one) and the pieces
        with telemetry.llm_call(self.llm, stream=True) as traced:
            text = await self._with_retries(call)
            traced.response(last[0], chunks=last[1])
        return text

    async def _with_retries(self, call: Callable[[], Awaitable[T]]) -> T:
        stop: stop_base = stop_after_attempt(self.retries + 1)
        if self.retry_window_s is not None:
            stop = stop | stop_after_delay(self.retry_window_s)
        retrying = AsyncRetrying(
            stop=stop,
            wait=wait_exponential(multiplier=self.backoff_s, max=60),
            retry=retry_if_exception(lambda e: error_kind(e) == "retry"),
            before_sleep=self._log_retry,
            reraise=True,
        )
        started = time.monotonic()
        try:
            return await retrying(call)
        except Exception as exc:
            kind = error_kind(exc)
            if kind == "bug":
                raise
            name = endpoint_name(self.llm)
            if kind == "retry":
                tries = retrying.statistics.get("attempt_number", self.retries + 1)
                what, todo = unavailable_reason(exc, self.llm)
                raise LLMUnavailableError(
                    f"the model endpoint {name} failed {tries} {'time' if tries == 1 else 'times'} in "
                    f"{time.monotonic() - started:.1f} s: {what}. {todo}",
                    timed_out=_timed_out(exc),
                ) from exc
            overflow, server_count = overflow_prompt_tokens(exc, self.max_output_tokens)
            if overflow:
                raise ContextOverflowError(f"{name}: {exc}", server_count) from exc
            raise LLMRequestError(
                f"the model endpoint {name} refused the request ({type(exc).__name__}: {exc}). "
                "Check the model name, the API key and the endpoint settings."
            ) from exc

    @staticmethod
    def _log_retry(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        what = unavailable_reason(exc, None)[0] if exc is not None else "?"
        logger.warning("LLM call failed (%s); retry %d in %.1fs", what, state.attempt_number, wait)
