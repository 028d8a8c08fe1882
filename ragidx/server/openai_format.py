"""OpenAI's chat wire format, both ways: a request's messages in, an ``Answer`` out (whole or as stream chunks).

Strings only at this edge: a request is read into typed pieces (the question, the earlier turns as LlamaIndex
``ChatMessage`` s) and an :class:`~ragidx.agent.answer.Answer` is written as OpenAI's ``chat.completion`` (or its
``chat.completion.chunk`` s), with ragidx's extra field ``ragidx`` (citations, sources, not-found verdict and why)
and the citations again as a closing "Sources" block in the message text, for clients that ignore extra fields.

Example:
    >>> question, history = read_conversation([{"role": "user", "content": "How do I print?"}])
    >>> question, history
    ('How do I print?', [])
"""

from __future__ import annotations

import math
import re
import time
import uuid
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.vector_stores.types import FilterCondition, MetadataFilter, MetadataFilters

from ragidx.agent.answer import Answer
from ragidx.retrieval.rerank_fallback import fallback_of
from ragidx.safety.injection import shown_title, shown_url
from ragidx.stores.filters import INTERNAL_FIELDS, as_filters, parse_filter

__all__ = [
    "CHAT_READER_FIELDS",
    "READER_FIELDS",
    "RequestError",
    "answer_extra",
    "chat_chunk",
    "check_body",
    "chat_completion",
    "completion_id",
    "error_body",
    "has_lone_surrogate",
    "read_conversation",
    "read_filters",
    "refuse_reader_fields",
    "sources_block",
]

SOURCES_TITLE = "Sources:"
MAX_FILTER_CONDITIONS = 32
MAX_JSON_DEPTH = 32
"""The deepest nesting of arrays and objects a request body may have (OpenAI's requests need 5)."""
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_SURROGATE = re.compile("[\ud800-\udfff]")
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
READER_FIELDS = ("user", "groups", "group", "principal", "principals")
"""Body fields that would name a reader: the reader comes from the API key, so a request naming one is refused."""
CHAT_READER_FIELDS = tuple(f for f in READER_FIELDS if f != "user")
"""The same for a chat request, where ``user`` is OpenAI's own field (an end-user id for the provider's logs, sent
by some clients): it is ignored, never read as a reader."""
_OWN_SOURCES = re.compile(r"\n\nSources:\n(?:\[\d+\] [^\n]*\n?)+\s*\Z")


class RequestError(ValueError):
    """A request ragidx cannot answer as sent (HTTP 400); ``param`` names the offending field."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def _text(content: Any, where: str) -> str:
    """A message's text: a string, or OpenAI's list of parts (text parts joined; others refused)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise RequestError(f"{where}: only text content is supported, not {kind!r}", param="messages")
            texts.append(part["text"])
        return "\n".join(texts)
    raise RequestError(f"{where}: content must be a string or a list of text parts", param="messages")


def read_conversation(messages: Any, *, max_question_chars: int = 8000) -> tuple[str, list[ChatMessage]]:
    """(the question: the last user message, the earlier user and assistant turns as history).

    System and developer messages are not passed on: ragidx's own instructions keep the answer to the knowledge
    base. Assistant turns lose the "Sources" block this server appended to them. Tool messages are refused.
    """
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list", param="messages")
    turns: list[tuple[str, str]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise RequestError(f"messages[{i}] must be an object with role and content", param="messages")
        role = message.get("role")
        if role in ("system", "developer"):
            continue
        if role not in ("user", "assistant"):
            raise RequestError(
                f"messages[{i}]: role {role!r} is not supported (user, assistant, system)", param="messages"
            )
        text = _text(message.get("content"), f"messages[{i}]")
        if role == "assistant":
            text = _OWN_SOURCES.sub("", text)
        turns.append((role, text))
    if not turns or turns[-1][0] != "user":
        raise RequestError("the last message must be the user's question", param="messages")
    question = turns[-1][1].strip()
    if not question:
        raise RequestError("the question (the last user message) is empty", param="messages")
    if len(question) > max_question_chars:
        raise RequestError(
            f"the question is {len(question)} characters long; at most {max_question_chars} are accepted",
            param="messages",
        )
    roles = {"user": MessageRole.USER, "assistant": MessageRole.ASSISTANT}
    history = [ChatMessage(role=roles[role], content=text) for role, text in turns[:-1] if text.strip()]
    return question, history


def read_filters(value: Any) -> MetadataFilters | None:
    """A request's ``filters`` field: an object ``{"field": value or [values]}`` (equals, or any of the list), or
    a list of condition strings as ``ragidx search --filter`` takes them (``"version>=7.4"``); all together.
    None or an empty object or list: no filter.

    Raises:
        RequestError: neither shape, a field name that is not one, a field the stores keep for themselves
            (:data:`~ragidx.stores.filters.INTERNAL_FIELDS`), a value that is not text, a number or true/false (or
            a non-empty list of them), a number outside int64 or not finite, text with a lone surrogate, a
            condition that does not parse, or more than ``MAX_FILTER_CONDITIONS`` conditions. Unknown fields and
            values of the wrong type are the engine's to refuse (:meth:`ragidx.engine.Engine.check_filters`).
    """
    if value is None:
        return None
    if isinstance(value, dict):
        _check_count(len(value))
        for field, given in value.items():
            if not _FIELD.match(field):
                raise RequestError(f"filters: {field!r} is not a field name (letters, digits, _)", param="filters")
            items = given if isinstance(given, list) else [given]
            if not items:
                raise RequestError(f"filters.{field}: an empty list matches nothing; give one value or more",
                                   param="filters")  # fmt: skip
            if not all(isinstance(v, str | int | float | bool) for v in items):
                raise RequestError(
                    f"filters.{field}: a value must be text, a number or true/false (or a list of them)",
                    param="filters",
                )
            _check_field(field, f"filters.{field}")
            for item in items:
                _check_value(item, f"filters.{field}")
        return as_filters(value)
    if isinstance(value, list):
        _check_count(len(value))
        conditions: list[MetadataFilter | MetadataFilters] = []
        for i, expression in enumerate(value):
            if not isinstance(expression, str):
                raise RequestError(f"filters[{i}] must be a condition string like 'product=writer'", param="filters")
            try:
                condition = parse_filter(expression)
            except ValueError as exc:
                raise RequestError(f"filters[{i}]: {_printable(str(exc))}", param="filters") from None
            _check_field(condition.key, f"filters[{i}]")
            for item in condition.value if isinstance(condition.value, list) else [condition.value]:
                _check_value(item, f"filters[{i}]")
            conditions.append(condition)
        return MetadataFilters(filters=conditions, condition=FilterCondition.AND) if conditions else None
    raise RequestError(
        'filters must be an object {"field": value} or a list of conditions ["field>=value"]', param="filters"
    )


def _check_field(field: str, where: str) -> None:
    if field in INTERNAL_FIELDS:
        raise RequestError(
            f"{where}: {field!r} is not a field requests may filter on; filter on the articles' own metadata "
            "(the error for an unknown field lists them)",
            param="filters",
        )


def _check_value(value: Any, where: str) -> None:
    """A value every store can compare: a finite number within int64 / float64, text without lone surrogates
    (a store's query would fail on anything else, and its error is no answer for the caller). Text that reads as
    a number (``"version>=1e308"``) is the store's to convert and refuse, as it knows the field's type."""
    if isinstance(value, bool):
        return
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        raise RequestError(f"{where}: the number is outside the range a filter can compare (64-bit integers)",
                           param="filters")  # fmt: skip
    if isinstance(value, float) and not math.isfinite(value):
        raise RequestError(f"{where}: a number must be finite", param="filters")
    if isinstance(value, str) and has_lone_surrogate(value):
        raise RequestError(f"{where}: the value holds a lone surrogate (text that is not Unicode)", param="filters")


def has_lone_surrogate(text: str) -> bool:
    """Whether ``text`` holds a code point of U+D800-U+DFFF on its own (JSON's ``"\\ud800"``): no UTF-8 text does,
    and stores, tokenizers and the model refuse it."""
    return _SURROGATE.search(text) is not None


def check_body(value: Any, *, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Refuse a request body that no part of ragidx can read: nested deeper than ``max_depth`` arrays and objects,
    or a string (a key or a value, anywhere) holding a lone surrogate.

    Raises:
        RequestError: which, and where (a JSON path such as ``messages[0].content``).
    """
    stack: list[tuple[Any, str, int]] = [(value, "", 1)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > max_depth:
                raise RequestError(f"the request body is nested deeper than {max_depth} levels")
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            for key, child in pairs:
                if isinstance(key, str) and has_lone_surrogate(key):
                    raise RequestError(f"a field name in {path or 'the body'} holds a lone surrogate (not Unicode)")
                where = f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else key)
                stack.append((child, where, depth + 1))
        elif isinstance(item, str) and has_lone_surrogate(item):
            top = re.split(r"[.\[]", path, maxsplit=1)[0] or None
            raise RequestError(f"{path or 'the body'} holds a lone surrogate (text that is not Unicode); send UTF-8 "
                               "text", param=top)  # fmt: skip


def _printable(text: str) -> str:
    """``text`` safe to echo in an error: lone surrogates replaced (JSON cannot carry them back)."""
    return _SURROGATE.sub("\ufffd", text)


def _check_count(count: int) -> None:
    if count > MAX_FILTER_CONDITIONS:
        raise RequestError(f"filters: {count} conditions; at most {MAX_FILTER_CONDITIONS} are accepted",
                           param="filters")  # fmt: skip


def refuse_reader_fields(body: dict[str, Any], fields: tuple[str, ...] = READER_FIELDS) -> None:
    """Refuse a request that names a reader (``fields`` present in ``body``): whom a request reads as comes from
    its API key alone, so a body cannot ask to read as someone else.

    Raises:
        PermissionError: the first such field, with what to do instead.
    """
    named = next((f for f in fields if f in body), None)
    if named is not None:
        raise PermissionError(
            f"the request names a reader ({named!r}); requests read as their API key's user and groups "
            "(serve.keys): use that reader's key, or narrow with 'filters'"
        )


def sources_block(answer: Answer) -> str:
    """The cited articles as the closing block of the message text ("" when nothing is cited)."""
    if not answer.citations:
        return ""
    lines = [f"[{c.number}] {c.title} — {c.url or shown_url(c.kb_id)}" for c in answer.citations]
    return f"\n\n{SOURCES_TITLE}\n" + "\n".join(lines)


def answer_extra(answer: Answer) -> dict[str, Any]:
    """ragidx's extra field: what the answer cites, what it was drawn from, and whether it is one."""
    return {
        "text": answer.text,
        "citations": [
            {"number": c.number, "kb_id": c.kb_id, "title": c.title, "url": c.url, "where": c.where, "quote": c.quote}
            for c in answer.citations
        ],
        "sources": [
            {
                "kb_id": a.get("kb_id"),
                "title": shown_title(str(a.get("title") or "")),  # as the Sources block shows it
                "url": shown_url(str(a.get("url") or "")),
                **{k: (a.get("metadata") or {}).get(k) for k in ("rerank_score", "normalized_rank", "article_rank")},
            }
            for a in answer.articles
        ],
        "not_found": answer.not_found,
        "reason": answer.not_found_reason,
        "curated": answer.curated,  # an editor's curated answer (ragidx.questions.curated)
        "rerank_fallback": fallback_of(answer.articles),  # the rerank service failed: why, and the order used
        "queries": list(answer.queries),
        "timings": dict(answer.timings),
    }


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def _usage(answer: Answer) -> dict[str, int]:
    prompt = int(answer.tokens.get("prompt_total", 0) or 0)
    completion = int(answer.tokens.get("completion", 0) or 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def chat_completion(answer: Answer, *, model: str, cid: str | None = None) -> dict[str, Any]:
    """The whole answer as OpenAI's ``chat.completion`` object, with the ``ragidx`` extra field."""
    return {
        "id": cid or completion_id(),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": answer.text + sources_block(answer)},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": _usage(answer),
        "ragidx": answer_extra(answer),
    }


def chat_chunk(
    cid: str,
    model: str,
    *,
    content: str | None = None,
    role: bool = False,
    finish: bool = False,
    answer: Answer | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk``: a piece of text, the opening role, or (``finish``) the closing one, which
    carries the usage and the ``ragidx`` extra field of ``answer``."""
    delta: dict[str, Any] = {}
    if role:
        delta["role"] = "assistant"
    if content is not None:
        delta["content"] = content
    chunk: dict[str, Any] = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": "stop" if finish else None, "logprobs": None}],
    }
    if finish and answer is not None:
        chunk["usage"] = _usage(answer)
        chunk["ragidx"] = answer_extra(answer)
    return chunk


def error_body(message: str, *, kind: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error JSON: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}
