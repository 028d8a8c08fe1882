"""Question-guided LLM summarization of one article, with an extractive fallback.

The prompt asks the model to keep what answers the question (facts, names, numbers, steps) within a
token target. Replies are cleaned (code fences, blank text) and checked: an error or an empty reply
falls back to the extractive compressor; a small overshoot is truncated, a large one falls back. Each
outcome is a named, counted reason in ``stats``. Title and URL are never rewritten: they stay in the
article's own fields.

Example:
    >>> "{question}" in SUMMARY_PROMPT and "{target_tokens}" in SUMMARY_PROMPT
    True
"""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole

from ragidx.article import Article
from ragidx.budget.compressor import ArticleCompressor
from ragidx.budget.extractive import ExtractiveCompressor
from ragidx.providers.chat import ChatCaller
from ragidx.providers.tokenizer import TokenCounter
from ragidx.sync_call import run_sync

__all__ = ["SUMMARY_PROMPT", "LLMSummaryCompressor"]

logger = logging.getLogger(__name__)

SUMMARY_PROMPT = """Compress the article below to at most {target_tokens} tokens for answering the question.
Keep what answers the question. Keep facts, names, numbers, dates, steps, commands and code exactly as \
written; drop the rest. Write in the article's language. Reply with the compressed text only, no preamble.

Question: {question}

Title: {title}
URL: {url}

Article:
{content}"""

_FENCE = re.compile(r"^\s*```[\w-]*\s*\n(.*?)\n\s*```\s*$", re.DOTALL)


class LLMSummaryCompressor:
    """Summarizes articles with an LLM and never returns more than it may.

    Args:
        llm: Any LlamaIndex LLM (called through ``ChatCaller``, without retries: a failure falls back).
        token_counter: Counts tokens of replies; default tiktoken ``cl100k_base``.
        fallback: Used when the LLM fails or overshoots badly; default ``ExtractiveCompressor``.
        max_input_tokens: Articles longer than this are first cut extractively before the LLM sees them.
        overshoot_tolerance: Replies up to this share over target are truncated, longer ones fall back.

    Example:
        >>> from llama_index.core.llms import MockLLM
        >>> LLMSummaryCompressor(MockLLM()).name
        'llm_summary'
    """

    verbatim = False
    """Its text is a model's summary, not the article's words (a citation does not quote it)."""

    name = "llm_summary"

    def __init__(
        self,
        llm: Any,
        *,
        token_counter: TokenCounter | None = None,
        fallback: ArticleCompressor | None = None,
        max_input_tokens: int = 6000,
        overshoot_tolerance: float = 0.25,
        min_target_tokens: int = 24,
    ) -> None:
        self.llm = llm
        self.tokens = token_counter or TokenCounter()
        self.fallback = fallback or ExtractiveCompressor(self.tokens)
        self.max_input_tokens = max_input_tokens
        self.overshoot_tolerance = overshoot_tolerance
        self.min_target_tokens = min_target_tokens
        self.stats: Counter[str] = Counter()
        self._stats_lock = threading.Lock()

    # --- protocol -------------------------------------------------------------------------------------
    async def acompress(self, article: Article, target_tokens: int, question: str) -> str:
        if self.tokens.count(article.content) <= target_tokens:
            self._count("fits")
            return article.content
        if target_tokens < self.min_target_tokens:
            return self._fall_back(article, target_tokens, question, "target_too_small", None)
        try:
            reply = await ChatCaller(self.llm, retries=0).achat(self._messages(article, target_tokens, question))
        except Exception as exc:
            return self._fall_back(article, target_tokens, question, "llm_error", exc)
        return self._check(reply.message.content or "", article, target_tokens, question)

    def compress(self, article: Article, target_tokens: int, question: str) -> str:
        """``acompress`` from synchronous code."""
        return str(run_sync(self.acompress(article, target_tokens, question)))

    # --- internals ------------------------------------------------------------------------------------
    def _count(self, reason: str) -> None:
        with self._stats_lock:
            self.stats[reason] += 1

    def _messages(self, article: Article, target: int, question: str) -> list[ChatMessage]:
        content = article.content
        if self.tokens.count(content) > self.max_input_tokens:
            content = self.fallback.compress(article, self.max_input_tokens, question)
        prompt = SUMMARY_PROMPT.format(
            target_tokens=target,
            question=question or "(none given)",
            title=article.title,
            url=article.url,
            content=content,
        )
        return [ChatMessage(role=MessageRole.USER, content=prompt)]

    def _check(self, reply: str, article: Article, target: int, question: str) -> str:
        text = reply.strip()
        if fenced := _FENCE.match(text):
            text = fenced.group(1).strip()
        if not text:
            return self._fall_back(article, target, question, "empty_reply", None)
        n = self.tokens.count(text)
        if n <= target:
            self._count("ok")
            return text
        if n <= target * (1 + self.overshoot_tolerance):
            self._count("overshoot_truncated")
            return self.tokens.truncate(text, target)
        return self._fall_back(article, target, question, "overshoot", None)

    def _fall_back(self, article: Article, target: int, question: str, reason: str, exc: BaseException | None) -> str:
        self._count(reason)
        logger.warning("LLM summary of %s fell back (%s): %s", article.kb_id, reason, exc or "")
        try:
            return self.fallback.compress(article, target, question)
        except Exception as inner:
            self._count("fallback_error")
            logger.warning("fallback compressor failed for %s: %s", article.kb_id, inner)
            return self.tokens.truncate(article.content, target)
