"""Defensive parsing of the reranker's final answer: JSON healing with named, counted repairs.

The model is asked for ``{"topics": [{"id": 42, "reason": "...", "excerpt": "..."}]}``. What comes back
may sit in a markdown fence, have prose around it, trailing commas, single quotes, Python literals,
unquoted keys, be cut off mid-way, carry ids as ``"7"`` or ``"ID:7"``, or be the old plain list
``[42, 18, 5]``. Each fix that was needed is reported as a ``JsonRepair`` so the caller can count it.

Example:
    >>> answer = parse_answer("```json\\n{'topics': [{'id': 'ID:7', 'reason': 'exact match'},]}\\n```")
    >>> [t.id for t in answer.topics], sorted(r.value for r in answer.repairs)
    ([7], ['markdown_fence', 'single_quotes', 'string_ids', 'trailing_comma'])
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import dirtyjson  # a llama-index-core dependency

__all__ = ["JsonRepair", "ParsedAnswer", "ParsedTopic", "coerce_id", "heal_json", "parse_answer"]


class JsonRepair(StrEnum):
    """A fix applied to the model's reply before it parsed."""

    MARKDOWN_FENCE = "markdown_fence"
    SURROUNDING_TEXT = "surrounding_text"
    TRAILING_COMMA = "trailing_comma"
    SINGLE_QUOTES = "single_quotes"
    SYNTAX = "syntax"
    TRUNCATED = "truncated"
    STRING_IDS = "string_ids"
    LEGACY_LIST = "legacy_list"


@dataclass(frozen=True)
class ParsedTopic:
    """One selected candidate as the model wrote it (``id`` is the ``[ID:n]`` shown to it)."""

    id: int
    reason: str = ""
    excerpt: str | None = None


@dataclass(frozen=True)
class ParsedAnswer:
    """The outcome of parsing a final answer. ``topics is None`` means nothing usable was found."""

    topics: list[ParsedTopic] | None
    repairs: tuple[JsonRepair, ...] = ()
    error: str | None = None
    malformed_items: int = 0
    duplicates: int = 0

    @property
    def ok(self) -> bool:
        return self.topics is not None


_FENCE_RE = re.compile(r"```[ \t]*(?:json|JSON|json5)?[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_ID_RE = re.compile(r"^\s*\[?\s*(?:id\s*[:#=]?\s*)?(\d+)\s*\]?\s*$", re.IGNORECASE)
_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}
_JSON_WORDS = {"true", "false", "null"}


def coerce_id(value: Any) -> tuple[int | None, bool]:
    """An id as an int, and whether it had to be read from a string (``"7"``, ``"ID:7"``, ``"[ID:7]"``)."""
    if isinstance(value, bool):
        return None, False
    if isinstance(value, int):
        return value, False
    if isinstance(value, float) and value.is_integer():
        return int(value), False
    if isinstance(value, str):
        m = _ID_RE.match(value)
        if m:
            return int(m.group(1)), True
    return None, False


def heal_json(text: str) -> tuple[Any, list[JsonRepair]]:
    """Parse the JSON value in ``text``, repairing what is needed; raise ``ValueError`` if none.

    When several JSON values sit in the text, an object with a ``topics`` key wins, then the last
    value that parses (models tend to think first and answer last).
    """
    body = text.strip()
    fence = _FENCE_RE.search(body)
    if fence and fence.group(1).strip():
        try:
            value, fixes = _heal_body(fence.group(1).strip())
            return value, [JsonRepair.MARKDOWN_FENCE, *fixes]
        except ValueError:
            pass  # the fence held prose (or a draft); look in the whole reply
    return _heal_body(body)


def _heal_body(body: str) -> tuple[Any, list[JsonRepair]]:
    try:
        return json.loads(body), []
    except ValueError:
        pass

    parsed: list[tuple[Any, list[JsonRepair]]] = []
    for start, end in _candidate_spans(body):
        span_repairs = [] if (start, end) == (0, len(body)) else [JsonRepair.SURROUNDING_TEXT]
        try:
            value, fixes = _parse_span(body[start:end])
        except ValueError:
            continue
        parsed.append((value, span_repairs + fixes))
    if not parsed:
        raise ValueError("no JSON value found in the reply")
    with_topics = [p for p in parsed if isinstance(p[0], dict) and "topics" in p[0]]
    return (with_topics or parsed)[-1]


def parse_answer(text: str) -> ParsedAnswer:
    """Read the final selection from the assistant's reply; see the module docstring."""
    try:
        value, repairs = heal_json(text)
    except ValueError as exc:
        return ParsedAnswer(topics=None, error=str(exc))
    if isinstance(value, dict):
        items = value.get("topics")
        if not isinstance(items, list):
            return ParsedAnswer(topics=None, repairs=tuple(repairs), error='the JSON has no "topics" list')
    elif isinstance(value, list):
        items = value
    else:
        return ParsedAnswer(topics=None, repairs=tuple(repairs), error="the JSON is neither object nor list")

    topics: list[ParsedTopic] = []
    seen: set[int] = set()
    malformed = duplicates = 0
    bare_ids = string_ids = False
    for item in items:
        if isinstance(item, dict):
            raw_id = item.get("id")
            reason = item.get("reason")
            excerpt = item.get("excerpt")
        else:
            raw_id, reason, excerpt = item, None, None
            bare_ids = True
        cid, from_string = coerce_id(raw_id)
        if cid is None:
            malformed += 1
            continue
        string_ids = string_ids or from_string
        if cid in seen:
            duplicates += 1
            continue
        seen.add(cid)
        topics.append(
            ParsedTopic(
                id=cid,
                reason=str(reason).strip() if reason is not None else "",
                excerpt=excerpt.strip() if isinstance(excerpt, str) and excerpt.strip() else None,
            )
        )
    if string_ids:
        repairs.append(JsonRepair.STRING_IDS)
    if bare_ids:
        repairs.append(JsonRepair.LEGACY_LIST)
    if items and not topics:
        return ParsedAnswer(
            topics=None, repairs=tuple(repairs), error="no item has a usable id", malformed_items=malformed
        )
    return ParsedAnswer(topics=topics, repairs=tuple(repairs), malformed_items=malformed, duplicates=duplicates)


# --- internals ---------------------------------------------------------------------------------------


def _candidate_spans(text: str) -> list[tuple[int, int]]:
    """Top-level ``{...}`` / ``[...]`` spans, quote-aware; an unclosed one runs to the end."""
    spans: list[tuple[int, int]] = []
    pos = 0
    while True:
        starts = [i for i in (text.find("{", pos), text.find("[", pos)) if i >= 0]
        if not starts:
            return spans
        start = min(starts)
        end = _match_close(text, start)
        spans.append((start, end))
        # An unclosed span runs to the end; still try brackets inside it (e.g. "[ID:3] ... {...}").
        pos = end if end < len(text) else start + 1


def _match_close(text: str, start: int) -> int:
    stack: list[str] = []
    quote: str | None = None
    i = start
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "\"'":
            # an apostrophe inside a word (it's, don't) is prose, not a quote
            if ch == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < len(text) and text[i + 1].isalnum():
                pass
            else:
                quote = ch
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            if not stack or stack[-1] != ch:
                return i + 1
            stack.pop()
            if not stack:
                return i + 1
        i += 1
    return len(text)


def _parse_span(span: str) -> tuple[Any, list[JsonRepair]]:
    try:
        return json.loads(span), []
    except ValueError:
        pass
    fixed, fixes = _normalize(span)
    try:
        return json.loads(fixed), fixes
    except ValueError:
        pass
    try:
        return _plain(dirtyjson.loads(fixed)), [*fixes, JsonRepair.SYNTAX]
    except Exception:  # dirtyjson raises its own error types
        pass
    closed = _close_truncated(fixed)
    if closed is not None:
        try:
            return json.loads(closed), [*fixes, JsonRepair.TRUNCATED]
        except ValueError:
            pass
    raise ValueError("unparseable span")


def _normalize(src: str) -> tuple[str, list[JsonRepair]]:
    """Single quotes → double, drop trailing commas, Python literals and bare keys → JSON."""
    out: list[str] = []
    fixes: list[JsonRepair] = []

    def note(fix: JsonRepair) -> None:
        if fix not in fixes:
            fixes.append(fix)

    i, n = 0, len(src)
    while i < n:
        ch = src[i]
        if ch in "\"'":
            j = i + 1
            buf: list[str] = []
            while j < n and src[j] != ch:
                if src[j] == "\\" and j + 1 < n:
                    nxt = src[j + 1]
                    buf.append("'" if (ch == "'" and nxt == "'") else src[j : j + 2])
                    j += 2
                    continue
                if ch == "'" and src[j] == '"':
                    buf.append('\\"')
                elif src[j] == "\n":
                    buf.append("\\n")
                else:
                    buf.append(src[j])
                j += 1
            if ch == "'":
                note(JsonRepair.SINGLE_QUOTES)
            out.append('"' + "".join(buf) + ('"' if j < n else ""))
            i = j + 1
            continue
        if ch == ",":
            k = i + 1
            while k < n and src[k].isspace():
                k += 1
            if k < n and src[k] in "}]":
                note(JsonRepair.TRAILING_COMMA)
                i += 1
                continue
        if ch.isalpha() or ch == "_":
            k = i
            while k < n and (src[k].isalnum() or src[k] == "_"):
                k += 1
            word = src[i:k]
            rest = src[k:].lstrip()
            if word in _PY_LITERALS:
                out.append(_PY_LITERALS[word])
                note(JsonRepair.SYNTAX)
            elif word not in _JSON_WORDS and rest.startswith(":"):
                out.append(f'"{word}"')
                note(JsonRepair.SYNTAX)
            else:
                out.append(word)
            i = k
            continue
        out.append(ch)
        i += 1
    return "".join(out), fixes


def _close_truncated(src: str) -> str | None:
    """Cut a truncated reply after its last complete object/array and close what is open."""
    stack: list[str] = []
    last: tuple[int, list[str]] | None = None
    in_string = False
    i = 0
    while i < len(src):
        ch = src[i]
        if in_string:
            if ch == "\\":
                i += 2
                continue
            if ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            if not stack or stack[-1] != ch:
                return None
            stack.pop()
            last = (i + 1, list(stack))
        i += 1
    if not stack or last is None:
        return None
    cut, open_stack = last
    return src[:cut] + "".join(reversed(open_stack))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
