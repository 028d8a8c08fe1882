"""Reading and rebuilding chat messages for the budget: tool results, tool-call groups, turns.

A ``retrieve_context`` result is a TOOL message; the budget gets its articles as a ``SearchResult`` keyed
by the message's ``tool_call_id``. A conversation that arrives as messages only (``BudgetedLLM``, a history
from outside) is read once by :func:`tool_results`; anything that is not a search result (plain text,
other JSON, an error shape with no article list) is left alone. A *group* is an assistant message that
calls tools together with the tool results that follow it: the budget removes or keeps a group whole.

Example:
    >>> from llama_index.core.base.llms.types import ChatMessage
    >>> msg = ChatMessage(role="tool", content='{"articles": [], "metadata": {}}',
    ...                   additional_kwargs={"tool_call_id": "c1"})
    >>> tool_results([msg])
    {'c1': SearchResult(articles=(), metadata={}, error=None)}
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ToolCallBlock

from ragidx.article import SearchResult

__all__ = [
    "call_id",
    "current_turn_start",
    "group_spans",
    "has_tool_calls",
    "message_text",
    "tool_results",
    "with_results",
]


def message_text(message: ChatMessage) -> str:
    """All text blocks of a message joined (``""`` when there are none)."""
    return "".join(b.text for b in message.blocks if isinstance(b, TextBlock))


def call_id(message: ChatMessage) -> str | None:
    """The tool-call id a TOOL message answers (``None`` for other messages)."""
    if message.role != MessageRole.TOOL:
        return None
    value = message.additional_kwargs.get("tool_call_id")
    return str(value) if value else None


def has_tool_calls(message: ChatMessage) -> bool:
    """An assistant message that calls tools (tool-call blocks or legacy ``tool_calls`` kwargs)."""
    if message.role != MessageRole.ASSISTANT:
        return False
    return any(isinstance(b, ToolCallBlock) for b in message.blocks) or bool(
        message.additional_kwargs.get("tool_calls")
    )


def tool_results(messages: Sequence[ChatMessage]) -> dict[str, SearchResult]:
    """The search results among ``messages`` by tool-call id, each parsed once (``SearchResult.from_json``)."""
    parsed = ((key, SearchResult.from_json(message_text(m))) for m in messages if (key := call_id(m)))
    return {key: result for key, result in parsed if result is not None}


def with_results(
    messages: Sequence[ChatMessage],
    results: Mapping[str, SearchResult],
    originals: Mapping[str, SearchResult] | None = None,
) -> list[ChatMessage]:
    """``messages`` with each tool result in ``results`` written as its JSON, in a new message with the same
    role and copied kwargs; one that is still the very object of ``originals`` keeps the text it came with."""
    out = []
    for m in messages:
        key = call_id(m)
        result = results.get(key) if key else None
        if result is None or (originals is not None and originals.get(key or "") is result):
            out.append(m)
        else:
            kwargs = copy.deepcopy(m.additional_kwargs)
            out.append(ChatMessage(role=m.role, additional_kwargs=kwargs, blocks=[TextBlock(text=result.to_json())]))
    return out


def current_turn_start(messages: Sequence[ChatMessage]) -> int:
    """Index of the last user message (the current question); ``len(messages)`` when there is none."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == MessageRole.USER:
            return i
    return len(messages)


def group_spans(messages: Sequence[ChatMessage], start: int = 0, stop: int | None = None) -> list[range]:
    """Split ``messages[start:stop]`` into units that may be removed independently.

    An assistant tool-call message and the TOOL messages right after it form one unit; any other
    message is its own unit (a stray TOOL message joins the unit before it).
    """
    stop = len(messages) if stop is None else stop
    spans: list[range] = []
    i = start
    while i < stop:
        j = i + 1
        if has_tool_calls(messages[i]) or messages[i].role == MessageRole.TOOL:
            while j < stop and messages[j].role == MessageRole.TOOL:
                j += 1
        spans.append(range(i, j))
        i = j
    return spans
