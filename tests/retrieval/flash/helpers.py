"""Test helpers for flash rerank: article nodes, a fake clock, and ScriptedLLM variants."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, ChatResponse
from llama_index.core.schema import NodeWithScore, TextNode
from pydantic import PrivateAttr

from ragidx.retrieval.flash import FlashReranker
from tests.fakes.scripted_llm import ScriptedLLM, ToolCall, text_of

TODAY = dt.date(2026, 1, 4)
TOOL = "get_topics_content"


def article_node(i: int, text: str | None = None, title: str | None = None, **meta: Any) -> NodeWithScore:
    """A whole-article node ``kb-{i}``; its upstream score falls with ``i``."""
    body = text if text is not None else f"Article {i} explains topic {i}.\n\nIt has a second paragraph."
    metadata = {"kb_id": f"kb-{i}", "title": title or f"Topic {i}", "date": f"2025-0{1 + i % 9}-1{i % 10}"}
    metadata.update(meta)
    return NodeWithScore(node=TextNode(id_=f"node-{i}", text=body, metadata=metadata), score=1.0 - i / 1000)


def article_nodes(n: int) -> list[NodeWithScore]:
    return [article_node(i) for i in range(1, n + 1)]


def kb(*display_ids: int) -> list[str]:
    """kb_ids of ``article_nodes`` candidates by their ``[ID:n]`` (n-th node is ``kb-n``)."""
    return [f"kb-{i}" for i in display_ids]


def tool_call(*ids: Any) -> ToolCall:
    return ToolCall(TOOL, {"ids": list(ids)})


class FakeClock:
    """A monotonic clock the test advances by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class SlowScriptedLLM(ScriptedLLM):
    """ScriptedLLM whose async calls really take ``delays[i]`` seconds (cancellable by a timeout)."""

    _delays: list[float] = PrivateAttr(default_factory=list)

    def __init__(self, script: Sequence[Any], delays: Sequence[float], **kwargs: Any) -> None:
        super().__init__(script, **kwargs)
        self._delays = list(delays)

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        index = len(self.calls)
        if index < len(self._delays):
            await asyncio.sleep(self._delays[index])
        return self._reply(list(messages), kwargs)


class UsageScriptedLLM(ScriptedLLM):
    """ScriptedLLM whose responses carry OpenAI-style usage in ``raw``."""

    _usage: dict[str, int] = PrivateAttr(default_factory=dict)

    def __init__(self, script: Sequence[Any], usage: dict[str, int], **kwargs: Any) -> None:
        super().__init__(script, **kwargs)
        self._usage = usage

    def _reply(self, messages: list[ChatMessage], kwargs: dict[str, Any]) -> ChatResponse:
        response = super()._reply(messages, kwargs)
        return ChatResponse(message=response.message, raw={"usage": dict(self._usage)})


def make_reranker(llm: ScriptedLLM, **settings: Any) -> FlashReranker:
    return FlashReranker(llm, today=lambda: TODAY, **settings)


def sent_text(llm: ScriptedLLM, call: int) -> str:
    """All text the LLM received in call ``call`` (0-based), messages joined."""
    return "\n".join(text_of(m) for m in llm.calls[call].messages)


def tool_results(llm: ScriptedLLM, call: int) -> list[str]:
    return [text_of(m) for m in llm.calls[call].messages if m.role.value == "tool"]
