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
import functools
import json
from collections.abc import Callable, Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ToolCallBlock

__all__ = [
    "content_segment",
    "content_segments",
    "current_turn_start",
    "dump_payload",
    "group_spans",
    "has_tool_calls",
    "message_text",
    "parse_payload_text",
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
    return parse_payload_text(message_text(message))


def parse_payload_text(text: str) -> dict[str, Any] | None:
    """``parse_tool_payload`` of a tool result's text."""
    text = text.strip()
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


def content_segment(content: str) -> str:
    """How an article's content appears in a tool result written by :func:`dump_payload`: a space, the
    JSON string, a comma (the space after the comma starts the next segment).

    Example:
        >>> content_segment('Say "hi"')
        ' "Say \\\\"hi\\\\"",'
    """
    return " " + json.dumps(content, ensure_ascii=False) + ","


def dump_payload(payload: dict[str, Any], *, default: Callable[[Any], Any] | None = None) -> str:
    """Compact JSON with non-ASCII kept readable (cheaper in tokens), where each article's content sits
    between two spaces: ``..."url":"…","content": "…", "metadata":{…}}``.

    A space that follows a non-space starts a new piece for every tokenizer the budget counts with
    exactly (``TokenCounter.word_additive``), so an article's content is counted alone as its
    :func:`content_segment`, and a tool result as its contents plus the rest
    (:func:`content_segments`): the budget counts each article's text once. The two spaces cost about
    two tokens per article. An article whose content is its last key is written plainly.

    Example:
        >>> dump_payload({"articles": [{"kb_id": "a", "content": "Hi.", "metadata": {}}], "metadata": {}})
        '{"articles":[{"kb_id":"a","content": "Hi.", "metadata":{}}],"metadata":{}}'
    """
    dumps = functools.partial(json.dumps, ensure_ascii=False, separators=(",", ":"), default=default)
    articles = payload.get("articles")
    if not isinstance(articles, list):
        return dumps(payload)
    parts = []
    for key, value in payload.items():
        if key == "articles":
            parts.append(dumps(key) + ":[" + ",".join(_dump_article(a, dumps) for a in articles) + "]")
        else:
            parts.append(dumps(key) + ":" + dumps(value))
    return "{" + ",".join(parts) + "}"


def _dump_article(article: Any, dumps: Callable[[Any], str]) -> str:
    if not isinstance(article, dict) or not isinstance(article.get("content"), str):
        return dumps(article)
    keys = list(article)
    at = keys.index("content")
    if at == len(keys) - 1:
        return dumps(article)
    before = dumps({k: article[k] for k in keys[:at]})
    after = dumps({k: article[k] for k in keys[at + 1 :]})
    head = before[:-1] + "," if at else "{"
    return head + '"content":' + content_segment(article["content"]) + " " + after[1:]


def content_segments(text: str, contents: Sequence[str]) -> tuple[list[str], str] | None:
    """Split a tool result's ``text`` into the :func:`content_segment` of each of ``contents`` found in
    it (in order, each between a non-space and a space) and the rest joined; ``None`` when none is found.
    For a word-additive counter, ``count(text) == count(rest) + sum(count(s) for s in segments)``."""
    segments: list[str] = []
    rest: list[str] = []
    pos = 0
    for content in contents:
        segment = content_segment(content)
        at = text.find(segment, pos)
        end = at + len(segment)
        if at <= 0 or text[at - 1].isspace() or not text.startswith(" ", end):
            continue  # not written by dump_payload (or not cut alike on both sides): left in the rest
        rest.append(text[pos:at])
        segments.append(segment)
        pos = end
    if not segments:
        return None
    rest.append(text[pos:])
    return segments, "".join(rest)


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
