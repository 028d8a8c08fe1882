"""Context that arrives inside a prompt: where a template put it, the question, and a last-resort cut.

LlamaIndex's response synthesizers and chat engines do not send retrieved text as tool results: they format it
into a prompt template, between fixed lines. :func:`find_context` finds that block in the messages about to be
sent so the budget can compress it (guided by the question) instead of treating the whole prompt as a fixed
part it cannot shorten. The templates recognised are listed in :data:`PROMPT_CONTEXT_MARKERS`, each as the text
that opens the block and the text that closes it (the last occurrence of the closing text after the opening):

- text QA and tree summarize (text and chat): from ``"... is below.\n---------------------\n"`` to
  ``"\n---------------------\n"``;
- refine (text): from ``"... more context below.\n------------\n"`` to ``"\n------------\n"``;
- refine (chat): from ``"New Context: "`` to ``"\nQuery: "``;
- the condense-plus-context chat engine's system message: from ``"... documents for the context:"`` to
  ``"Instruction: "`` (its refine: ``"Existing Answer:"``).

A template of your own is recognised when you pass its markers (``BudgetedLLM(..., context_markers=...)``).
When no block is recognised and the prompt cannot fit, :func:`truncate_middle` cuts the middle of the largest
message (its start and end stay: instructions first, the latest turns and the question last), and the caller
logs it.

Example:
    >>> from llama_index.core.base.llms.types import ChatMessage
    >>> msg = ChatMessage(role="user", content=(
    ...     "Context information is below.\\n---------------------\\nTables are inserted with Ctrl+F12."
    ...     "\\n---------------------\\nGiven the context information, answer the query.\\nQuery: insert a table?\\n"
    ...     "Answer: "))
    >>> found = find_context([msg])
    >>> (found.index, found.marker.name, found.block, found.question)
    (0, 'text QA', 'Tables are inserted with Ctrl+F12.', 'insert a table?')
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock

from ragidx.budget.messages import message_text
from ragidx.providers.tokenizer import TokenCounter

__all__ = ["PROMPT_CONTEXT_MARKERS", "ContextMarker", "PromptContext", "find_context", "truncate_middle"]

ELISION = "\n[…]\n"
"""Stands where :func:`truncate_middle` removed text, so the model knows some is missing."""


@dataclass(frozen=True)
class ContextMarker:
    """A template's context block: the text just before it and the text just after it."""

    name: str
    opening: str
    closing: str


PROMPT_CONTEXT_MARKERS: tuple[ContextMarker, ...] = (
    ContextMarker("text QA", "is below.\n---------------------\n", "\n---------------------\n"),
    ContextMarker("refine", "more context below.\n------------\n", "\n------------\n"),
    ContextMarker("chat refine", "New Context: ", "\nQuery: "),
    ContextMarker(
        "condense-plus-context refine", "Here are the relevant documents for the context:", "Existing Answer:"
    ),
    ContextMarker("condense-plus-context", "Here are the relevant documents for the context:", "Instruction: "),
)
"""The context blocks of LlamaIndex's default templates (see the module docstring), tried in this order: in each
message the first marker found counts (so a refine marker comes before the marker whose closing it contains)."""

_QUESTION = (
    re.compile(r"(?:^|\n)\s*Query: (.+)"),
    re.compile(r"The original query is as follows: (.+)"),
)


@dataclass(frozen=True)
class PromptContext:
    """The context block found in ``messages[index]``: the text before it, the block, the text after it, and
    the question that guides its compression."""

    index: int
    marker: ContextMarker
    before: str
    block: str
    after: str
    question: str

    def host_text(self, block: str) -> str:
        """The host message's text with ``block`` in place of the context."""
        return f"{self.before}{block}{self.after}"


def find_context(
    messages: Sequence[ChatMessage], markers: Sequence[ContextMarker] = PROMPT_CONTEXT_MARKERS
) -> PromptContext | None:
    """The largest context block of a recognised template among ``messages`` (text-only messages that are not tool
    results: those are the agent's material), or ``None``.

    The block is the text between a marker's opening and the last occurrence of its closing after it, with the
    whitespace around it left in ``before`` / ``after``. The question is the ``Query: ...`` line of the host (or
    the refine template's "original query"), else the last user message that is not the host, else the host's
    text outside the block.
    """
    best: PromptContext | None = None
    for i, m in enumerate(messages):
        if m.role == MessageRole.TOOL or not m.blocks or not all(isinstance(b, TextBlock) for b in m.blocks):
            continue
        text = message_text(m)
        for marker in markers:
            start = text.find(marker.opening)
            if start < 0:
                continue
            start += len(marker.opening)
            end = text.rfind(marker.closing, start)
            if end < 0:
                continue
            raw = text[start:end]
            block = raw.strip()
            if block and (best is None or len(block) > len(best.block)):
                lead = len(raw) - len(raw.lstrip())
                before, after = text[: start + lead], text[start + lead + len(block) :]
                best = PromptContext(i, marker, before, block, after, _question(messages, i, before + after))
            break  # the first marker found in a message is its template
    return best


def _question(messages: Sequence[ChatMessage], host: int, outside: str) -> str:
    for pattern in _QUESTION:
        found = pattern.findall(outside)
        if found:
            return str(found[-1]).strip()
    for i in range(len(messages) - 1, -1, -1):
        if i != host and messages[i].role == MessageRole.USER:
            return message_text(messages[i])
    return outside.strip()


def truncate_middle(text: str, max_tokens: int, tokens: TokenCounter) -> str:
    """``text`` in at most ``max_tokens`` tokens: its first and last parts with :data:`ELISION` between them
    (two thirds of the room to the end, where a prompt keeps its latest turns and its question).

    Example:
        >>> counter = TokenCounter()
        >>> truncate_middle("one two three four five six seven eight nine ten", 7, counter)
        'one two\\n[…]\\n nine ten'
    """
    if tokens.count(text) <= max_tokens:
        return text
    room = max_tokens - tokens.count(ELISION)
    if room <= 0:
        return tokens.truncate(text, max_tokens)
    ids = tokens.encode(text)
    tail_n = (2 * room) // 3
    head = tokens.truncate(text, room - tail_n)
    tail = tokens.decode(ids[len(ids) - tail_n :]).lstrip("\ufffd") if tail_n else ""
    out = f"{head}{ELISION}{tail}"
    while out and tokens.count(out) > max_tokens:  # a join may merge into fewer or more tokens than its parts
        tail = tail[1:]
        out = f"{head}{ELISION}{tail}" if tail else tokens.truncate(f"{head}{ELISION}", max_tokens)
    return out
