"""Conversation memory: fold older turns into one summary message when the conversation grows.

The history (everything before the current question) is cut so that the last ``keep_last`` messages
stay verbatim; the cut moves earlier rather than separate an assistant tool-call message from its
tool results. Leading system messages stay. The older part becomes one message starting with
``SUMMARY_PREFIX``, written by the given LLM, or extractively (recent lines first) without one or
when it fails.

Example:
    >>> from llama_index.core.base.llms.types import ChatMessage
    >>> history = [ChatMessage(role="user", content=f"question {i}") for i in range(5)]
    >>> result = ConversationMemory().summarize(history)
    >>> (result.summarized_messages, len(result.messages), result.method)
    (3, 3, 'extractive')
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock

from ragidx.article import SearchResult
from ragidx.budget.messages import call_id, message_text
from ragidx.providers.chat import ChatCaller
from ragidx.providers.tokenizer import TokenCounter
from ragidx.sync_call import run_sync

__all__ = ["MEMORY_PROMPT", "SUMMARY_PREFIX", "ConversationMemory", "MemoryResult"]

logger = logging.getLogger(__name__)

SUMMARY_PREFIX = "Summary of the earlier conversation:\n"
MEMORY_PROMPT = """Summarize the earlier part of a conversation below in at most {summary_tokens} tokens.
Keep the user's questions and goals, facts, names, numbers, decisions and the sources (titles, URLs) \
already cited. The conversation now continues with: {question}
Reply with the summary only.

{transcript}"""
_LINE_TOKENS = 400


@dataclass(frozen=True)
class MemoryResult:
    """The new history, how many messages were folded, the summary's tokens and how it was made."""

    messages: list[ChatMessage]
    summarized_messages: int
    summary_tokens: int
    method: str


class ConversationMemory:
    """Summarizes older turns into one message, keeping tool-call groups whole.

    Args:
        llm: Optional LlamaIndex LLM; without one the summary is extractive.
        token_counter: Counts and cuts tokens.
        keep_last: Messages kept verbatim at the end of the history (more when a group would split).
        summary_tokens: Default size of the summary.
        max_input_tokens: Most transcript tokens sent to the LLM (the most recent are kept).
        summary_role: Role of the summary message (USER by default: templates accept it anywhere).

    Example:
        >>> ConversationMemory(keep_last=4).keep_last
        4
    """

    def __init__(
        self,
        llm: Any | None = None,
        token_counter: TokenCounter | None = None,
        *,
        keep_last: int = 2,
        summary_tokens: int = 1000,
        max_input_tokens: int = 6000,
        summary_role: MessageRole = MessageRole.USER,
    ) -> None:
        self.llm = llm
        self.tokens = token_counter or TokenCounter()
        self.keep_last = max(0, keep_last)
        self.summary_tokens = summary_tokens
        self.max_input_tokens = max_input_tokens
        self.summary_role = summary_role

    def cut_index(self, history: Sequence[ChatMessage]) -> tuple[int, int]:
        """``(lead, cut)``: ``history[lead:cut]`` gets summarized; ``lead`` skips leading system messages."""
        lead = 0
        while lead < len(history) and history[lead].role == MessageRole.SYSTEM:
            lead += 1
        cut = len(history) - self.keep_last
        while cut > lead and cut < len(history) and history[cut].role == MessageRole.TOOL:
            cut -= 1  # keep the assistant tool-call message with its results
        return lead, max(cut, lead)

    def summarize(self, history: Sequence[ChatMessage], **kwargs: Any) -> MemoryResult:
        """``asummarize`` from synchronous code (same keyword arguments)."""
        result: MemoryResult = run_sync(self.asummarize(history, **kwargs))
        return result

    async def asummarize(
        self,
        history: Sequence[ChatMessage],
        *,
        question: str = "",
        summary_tokens: int | None = None,
        results: Mapping[str, SearchResult] | None = None,
    ) -> MemoryResult:
        lead, cut = self.cut_index(history)
        if cut <= lead:
            return MemoryResult(list(history), 0, 0, "none")
        size = summary_tokens or self.summary_tokens
        lines = self._lines(history[lead:cut], results or {})
        summary, method = "", "extractive"
        if self.llm is not None:
            try:
                reply = await ChatCaller(self.llm, retries=0).achat(self._prompt(lines, question, size))
                summary = (reply.message.content or "").strip()
                method = "llm" if summary else "extractive_fallback"
            except Exception as exc:
                logger.warning("memory summary by LLM failed, using extractive: %s", exc)
                method = "extractive_fallback"
        if not summary:  # extractive: the most recent lines, each cut to a fair share of the size
            summary = self._recent(lines, size, per_line=max(24, size // max(1, len(lines))))
        message = ChatMessage(role=self.summary_role, content=SUMMARY_PREFIX + self.tokens.truncate(summary, size))
        new = [*history[:lead], message, *history[cut:]]
        return MemoryResult(new, cut - lead, self.tokens.count(message.content or ""), method)

    # --- internals ------------------------------------------------------------------------------------
    def _lines(self, messages: Sequence[ChatMessage], results: Mapping[str, SearchResult]) -> list[str]:
        """One line a message; a search result (in ``results`` by its call id) is listed by its titles."""
        lines: list[str] = []
        for m in messages:
            role = m.role.value
            calls = [b for b in m.blocks if isinstance(b, ToolCallBlock)]
            result = results.get(call_id(m) or "")
            if result is not None:
                titles = "; ".join(f"{a.title or a.kb_id} ({a.url})" for a in result.articles)
                text = f"retrieved: {titles}" if titles else "retrieved nothing"
            elif calls:
                text = "; ".join(f"called {c.tool_name}({c.tool_kwargs})" for c in calls)
            else:
                text = message_text(m).removeprefix(SUMMARY_PREFIX)
            if text.strip():
                lines.append(f"{role}: {self.tokens.truncate(text.strip(), _LINE_TOKENS)}")
        return lines

    def _prompt(self, lines: list[str], question: str, size: int) -> list[ChatMessage]:
        transcript = self._recent(lines, self.max_input_tokens, per_line=_LINE_TOKENS)
        prompt = MEMORY_PROMPT.format(summary_tokens=size, question=question or "(unknown)", transcript=transcript)
        return [ChatMessage(role=MessageRole.USER, content=prompt)]

    def _recent(self, lines: list[str], budget: int, *, per_line: int) -> str:
        """The most recent lines, each cut to ``per_line`` tokens, that fit ``budget`` (in order)."""
        picked: list[str] = []
        used = 0
        for line in reversed(lines):
            piece = self.tokens.truncate(line, per_line)
            cost = self.tokens.count(piece) + 1
            if used + cost > budget:
                break
            picked.append(piece)
            used += cost
        return "\n".join(reversed(picked))
