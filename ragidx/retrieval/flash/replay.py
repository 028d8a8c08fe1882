"""Replay a recorded flash rerank offline, to test prompt or parser changes on real traffic.

``ReplayLLM`` answers each call with the next recorded response (recorded timeouts and API errors are
raised again); ``replay`` re-runs the rerank on the recorded candidates with a reranker you build
around that LLM, and returns the new ``FlashResult`` to compare with ``trace.decision`` and
``trace.selected_kb_ids``. A reranker that makes more calls than were recorded gets
``ReplayExhaustedError`` (an API error, so the result is a fallback and the drift is visible).

Example:
    >>> trace = FlashTrace.load("traces/flash-20260104T101500-1a2b3c4d.json")  # doctest: +SKIP
    >>> new = replay(trace, lambda llm: FlashReranker(llm, top_n=3))  # doctest: +SKIP
    >>> (new.decision, new.selected_kb_ids) == (trace.decision, trace.selected_kb_ids[:3])  # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole, ToolCallBlock
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.llms.function_calling import FunctionCallingLLM

from ragidx.providers.playback import PlaybackLLM
from ragidx.retrieval.flash.reranker import FlashReranker, FlashResult
from ragidx.retrieval.flash.trace import FlashTrace, TraceResponse
from ragidx.sync_call import run_sync

__all__ = ["ReplayExhaustedError", "ReplayLLM", "ReplayedAPIError", "areplay", "replay"]

logger = logging.getLogger(__name__)

RerankerFactory = Callable[[FunctionCallingLLM], FlashReranker]


class ReplayExhaustedError(RuntimeError):
    """The reranker asked for more LLM calls than the trace recorded."""


class ReplayedAPIError(RuntimeError):
    """A recorded API error, raised again."""


class ReplayLLM(PlaybackLLM):
    """A function-calling LLM that plays back recorded responses in order.

    Example:
        >>> llm = ReplayLLM([TraceResponse(text='{"topics": []}')])
        >>> llm.chat([]).message.content
        '{"topics": []}'
    """

    model_name: str = "replay"
    _responses: list[TraceResponse] = PrivateAttr()
    _cursor: Any = PrivateAttr()
    _sent: list[list[ChatMessage]] = PrivateAttr()

    def __init__(self, responses: Sequence[TraceResponse], model_name: str = "replay", **kwargs: Any) -> None:
        super().__init__(model_name=model_name, **kwargs)
        self._responses = list(responses)
        self._cursor = itertools.count()
        self._sent = []

    @classmethod
    def from_trace(cls, trace: FlashTrace) -> ReplayLLM:
        return cls([t.response for t in trace.turns if t.response is not None], model_name=trace.model_name)

    @classmethod
    def class_name(cls) -> str:
        return "ReplayLLM"

    @property
    def sent(self) -> list[list[ChatMessage]]:
        """The messages of every call made, in order (to diff prompts against the trace)."""
        return self._sent

    def _reply(self, messages: list[ChatMessage], kwargs: dict[str, Any]) -> ChatResponse:
        self._sent.append(list(messages))
        index = next(self._cursor)
        if index >= len(self._responses):
            raise ReplayExhaustedError(f"the trace recorded {len(self._responses)} responses; call {index + 1}")
        rec = self._responses[index]
        if rec.error_kind == "timeout":
            raise TimeoutError(rec.error or "recorded timeout")
        if rec.error_kind is not None:
            raise ReplayedAPIError(rec.error or "recorded API error")
        blocks: list[Any] = [
            ToolCallBlock(tool_call_id=c.id or None, tool_name=c.name, tool_kwargs=c.arguments) for c in rec.tool_calls
        ]
        message = (
            ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks)
            if blocks
            else ChatMessage(role=MessageRole.ASSISTANT, content=rec.text)
        )
        return ChatResponse(message=message, raw={"usage": rec.usage} if rec.usage else None)


async def areplay(trace: FlashTrace, reranker_factory: RerankerFactory | None = None) -> FlashResult:
    """Re-run ``trace`` against its recorded responses; see the module docstring.

    ``reranker_factory`` builds the reranker under test around the replay LLM; by default one with the
    trace's recorded settings. The recorded date, query, conversation and facts are reused.
    """
    llm = ReplayLLM.from_trace(trace)
    if reranker_factory is not None:
        reranker = reranker_factory(llm)
    else:
        known = FlashReranker.model_fields
        dropped = sorted(k for k in trace.settings if k not in known)
        if dropped:
            logger.warning("replay: ignoring recorded settings this ragidx does not have: %s", ", ".join(dropped))
        reranker = FlashReranker(llm, **{k: v for k, v in trace.settings.items() if k in known})
    return await reranker.arerank_detailed(
        trace.query,
        trace.to_nodes(),
        conversation=trace.conversation,
        user_facts=trace.user_facts,
        today=trace.today_date,
    )


def replay(trace: FlashTrace, reranker_factory: RerankerFactory | None = None) -> FlashResult:
    """Synchronous ``areplay``."""
    return run_sync(areplay(trace, reranker_factory))
