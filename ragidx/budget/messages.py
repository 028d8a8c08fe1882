"""Reading and rebuilding chat messages for the budget: tool results, tool-call groups, turns.

A ``retrieve_context`` tool result is a TOOL message whose text is JSON
``{"articles": [...], "metadata": {...}}``; anything else (plain text, other JSON, an error shape with
no article list) is left alone. A *group* is an assistant message that calls tools together with the
tool results that follow it: the budget removes or keeps a group whole, never half of it.

Example:
    >>> from llama_index.core.base.llms.types import ChatMessage
    >>> msg = ChatMessage(role="tool", content='{"articles": [], "metadata": {}}')
    >>> parse_tool_payload(msg)
    {'articles': [], 'metadata': {}}
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ToolCallBlock

__all__ = [
    "current_turn_start",
    "dump_payload",
    "group_spans",
    "has_tool_calls",
    "message_text",
    "parse_tool_payload",
    "replace_text",
]


def message_text(message: ChatMessage) -> str:
    """All text blocks of a message joined (``""`` when there are none)."""
    return "".join(b.text for b in message.blocks if isinstance(b, TextBlock))


def has_tool_calls(message: ChatMessage) -> bool:
    """An assistant message that calls tools (tool-call blocks or legacy ``tool_calls`` kwargs)."""
    if message.role != MessageRole.ASSISTANT:
        return False
    return any(isinstance(b, ToolCallBlock) for b in message.blocks) or bool(
        message.additional_kwargs.get("tool_calls")
    )


def parse_tool_payload(message: ChatMessage) -> dict[str, Any] | None:
    """The JSON object of an article-carrying tool result, or ``None`` if this message isn't one.

    Requires role TOOL, a JSON object, and an ``articles`` list whose items are objects with a string
    ``content``. Error-shaped results (no ``articles``) return ``None`` and pass through untouched.
    """
    if message.role != MessageRole.TOOL:
        return None
    text = message_text(message).strip()
    if not text.startswith("{"):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    articles = data.get("articles")
    if not isinstance(articles, list):
        return None
    for a in articles:
        if not isinstance(a, dict) or not isinstance(a.get("content", ""), str):
            return None
    return data


def dump_payload(payload: dict[str, Any]) -> str:
    """Compact JSON, non-ASCII kept readable (and cheaper in tokens)."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def replace_text(message: ChatMessage, text: str) -> ChatMessage:
    """A new message with the same role and (copied) kwargs, whose only block is ``text``."""
    return ChatMessage(
        role=message.role,
        additional_kwargs=copy.deepcopy(message.additional_kwargs),
        blocks=[TextBlock(text=text)],
    )


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
