"""The context budget hook: run it before every LLM call of the agent.

``ContextBudget.fit(messages, results, render, ...)`` takes the conversation, its search results as
objects (``SearchResult`` by tool-call id) and a renderer that writes the prompt as it is sent. It
deduplicates the articles, re-normalizes their ranks, compresses them in proportion to rank when the
prompt passes the trigger, folds old turns into a summary when the conversation grows, renders the prompt
and counts it: that count is the one guard of the window. ``apply(messages, ...)`` does the same for a
conversation that arrives as messages only (their search results are read once).

Invariants (tested):

- Returns new messages and never edits the input ones; ``apply`` returns ``None`` when nothing changed.
- An assistant tool-call message and its tool results are kept or removed together, never split.
- Within each tool result the order of articles is kept. An article repeated in a later result becomes
  ``{"kb_id", "title", "url", "see_above": true}``; its full copy is the best-scored one.
- Compressed articles carry ``compressed: true``, ``original_tokens`` and ``tokens`` in metadata; each
  rewritten result's metadata carries ``tokens_saved`` and ``compressed_articles_count``.
- Tool messages that are not search results with articles are never rewritten.
- The counted prompt (as rendered) + safety margin + reserved output never exceeds the window: whatever
  the compressor returns is counted and cut, worst-ranked articles are cut or dropped, then old history,
  then earlier tool-call groups of the current turn. Only when the fixed part (system prompt + tool
  schemas + current question + reserved output + margin) can't fit is ``ContextWindowTooSmallError`` raised.

Example:
    >>> budget = ContextBudget()
    >>> result = budget.apply([], system_prompt="Be brief.", context_window=8192, max_output_tokens=512)
    >>> (result.messages, result.report.path)
    (None, ['under_trigger'])
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llama_index.core.async_utils import asyncio_run
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.instrumentation import get_dispatcher

from ragidx.article import SEE_ABOVE, Article, SearchResult
from ragidx.budget.accounting import PromptAccountant, WindowLimits
from ragidx.budget.allocation import SMALL_WINDOW_TOKENS, thresholds_for_window
from ragidx.budget.compressor import ArticleCompressor, acompress_many
from ragidx.budget.extractive import ExtractiveCompressor
from ragidx.budget.memory import ConversationMemory, MemoryResult
from ragidx.budget.messages import call_id, message_text, tool_results, with_results
from ragidx.budget.report import BudgetReport, ContextBudgetEvent
from ragidx.budget.run import BudgetRun, Renderer
from ragidx.providers.tokenizer import TokenCounter
from ragidx.tools.cap import RetrievalCap

__all__ = ["REFERENCE_KEY", "BudgetResult", "ContextBudget", "Fit", "Renderer"]

logger = logging.getLogger(__name__)
dispatcher = get_dispatcher(__name__)

REFERENCE_KEY = SEE_ABOVE


@dataclass(frozen=True)
class Fit:
    """One budgeted call: the messages to send (``tokens`` counts them with the tool schemas), the
    conversation kept (tool messages as they came), the results as sent and the articles shown in full."""

    messages: list[ChatMessage]
    conversation: list[ChatMessage]
    results: dict[str, SearchResult]
    articles: list[Article]
    tokens: int
    report: BudgetReport
    changed: bool


@dataclass(frozen=True)
class BudgetResult:
    """New messages (``None`` when nothing changed) and the report of what was done."""

    messages: list[ChatMessage] | None
    report: BudgetReport

    @property
    def changed(self) -> bool:
        return self.messages is not None


class ContextBudget:
    """Keeps every LLM call of the agent inside its context window (see the module docstring).

    Cheap to build: nothing loads until the first call::

        budget = ContextBudget(compressor=ExtractiveCompressor(), cap=cap, fallback_context_window=32768)
        fit = budget.fit(conversation, results, render, tools=tools, context_window=8192, max_output_tokens=512)
        if fit.report.fallback_recommended: ...  # switch to the larger model, fit again
        send(fit.messages)

    Args:
        token_counter: Counts tokens (default tiktoken ``cl100k_base``); shared with the default compressor.
        compressor: Any ``ArticleCompressor``; default ``ExtractiveCompressor``.
        summarizer_llm / memory: LLM for summarizing old turns, or a ready ``ConversationMemory``.
        trigger_pct / target_pct: Act above ``trigger_pct`` of the window, aim at ``target_pct``
            (lowered to 75% / 70% for windows under ``small_window_tokens``).
        min_article_tokens: Per-article minimum (adapted down for small windows and budgets).
        safety_margin_pct: Share of the window kept free because the model's tokenizer differs.
        memory_trigger_pct: Summarize old turns when the conversation passes this share of the window.
        fallback_context_window: Window of a configured larger model; enables ``fallback_recommended``.
        cap: A ``RetrievalCap`` the hook sets after each run for the retrieve tool to read.
        max_articles_per_call: Upper bound of the cap (the tool's usual ``top_k``).
        max_concurrency: Concurrent compressions in ``afit``.
    """

    def __init__(
        self,
        token_counter: TokenCounter | None = None,
        compressor: ArticleCompressor | None = None,
        *,
        summarizer_llm: Any | None = None,
        memory: ConversationMemory | None = None,
        trigger_pct: float = 0.85,
        target_pct: float = 0.80,
        min_article_tokens: int = 300,
        safety_margin_pct: float = 0.05,
        memory_trigger_pct: float = 0.80,
        small_window_tokens: int = SMALL_WINDOW_TOKENS,
        fallback_context_window: int | None = None,
        cap: RetrievalCap | None = None,
        max_articles_per_call: int | None = 5,
        default_article_tokens: int = 1000,
        max_concurrency: int = 4,
    ) -> None:
        if not 0 < target_pct <= trigger_pct <= 1:
            raise ValueError(f"need 0 < target_pct <= trigger_pct <= 1, got target {target_pct}, trigger {trigger_pct}")
        if not 0 <= safety_margin_pct < 0.5:
            raise ValueError(f"safety_margin_pct must be in [0, 0.5), got {safety_margin_pct}")
        self.tokens = token_counter or TokenCounter()
        self.accountant = PromptAccountant(self.tokens)
        self.compressor: ArticleCompressor = compressor or ExtractiveCompressor(self.tokens)
        self.memory = memory or ConversationMemory(summarizer_llm, self.tokens)
        self.trigger_pct, self.target_pct = trigger_pct, target_pct
        self.min_article_tokens = min_article_tokens
        self.safety_margin_pct = safety_margin_pct
        self.memory_trigger_pct = memory_trigger_pct
        self.small_window_tokens = small_window_tokens
        self.fallback_context_window = fallback_context_window
        self.cap = cap
        self.max_articles_per_call = max_articles_per_call
        self.default_article_tokens = default_article_tokens
        self.max_concurrency = max_concurrency

    @classmethod
    def from_settings(
        cls,
        settings: Any,
        *,
        token_counter: TokenCounter | None = None,
        compressor: ArticleCompressor | None = None,
        summarizer_llm: Any | None = None,
        cap: RetrievalCap | None = None,
    ) -> ContextBudget:
        """Build from ``ragidx.config.Settings`` (budget_* values, fallback_llm's window, top_k)."""
        fallback = getattr(settings, "fallback_llm", None)
        return cls(
            token_counter or TokenCounter(settings.llm.tokenizer or "cl100k_base"),
            compressor,
            summarizer_llm=summarizer_llm,
            cap=cap,
            trigger_pct=settings.budget_trigger_pct,
            target_pct=settings.budget_target_pct,
            min_article_tokens=settings.budget_min_article_tokens,
            safety_margin_pct=settings.budget_safety_margin_pct,
            memory_trigger_pct=settings.memory_trigger_pct,
            fallback_context_window=fallback.context_window if fallback is not None else None,
            max_articles_per_call=settings.top_k,
        )

    # --- public API -----------------------------------------------------------------------------------
    @dispatcher.span
    async def afit(
        self,
        messages: Sequence[ChatMessage],
        results: Mapping[str, SearchResult],
        render: Renderer,
        *,
        tools: Sequence[Any] | None = None,
        question: str | None = None,
        context_window: int,
        max_output_tokens: int,
    ) -> Fit:
        """Budget one call: ``results`` are the conversation's search results by tool-call id, ``render``
        writes the prompt as sent. See the module docstring for the guarantees.

        Raises:
            ContextWindowTooSmallError: The fixed part of the prompt cannot fit the window.
        """
        c = self._begin(messages, results, render, tools, context_window, max_output_tokens)
        q = question if question is not None else message_text(c.messages[c.q_idx]) if c.q_idx < len(c.messages) else ""
        if not c.done and self._memory_needed(c):
            size = max(64, min(self.memory.summary_tokens, context_window // 10))
            history = c.messages[: c.q_idx]
            self._use_memory(c, await self.memory.asummarize(history, question=q, summary_tokens=size, results=results))
        if not c.done:
            jobs = c.plan()
            articles, targets = [e.article for e, _ in jobs], [t for _, t in jobs]
            n = self.max_concurrency
            c.finish(jobs, await acompress_many(self.compressor, articles, targets, q, max_concurrency=n))
        return self._result(c)

    def fit(self, *args: Any, **kwargs: Any) -> Fit:
        """``afit`` from synchronous code."""
        return asyncio_run(self.afit(*args, **kwargs))

    async def aapply(
        self,
        messages: Sequence[ChatMessage],
        *,
        system_prompt: str | None = None,
        tools: Sequence[Any] | None = None,
        question: str | None = None,
        context_window: int,
        max_output_tokens: int,
    ) -> BudgetResult:
        """``afit`` for a conversation that arrives as messages (from a LlamaIndex agent): its search results
        are read once, and those it rewrites come back as JSON; ``messages`` is ``None`` when nothing changed."""
        results = tool_results(messages)
        head = [ChatMessage(role=MessageRole.SYSTEM, content=system_prompt)] if system_prompt else []

        def render(conversation: Sequence[ChatMessage], sent: Mapping[str, SearchResult], _: Any) -> list[ChatMessage]:
            return [*head, *with_results(conversation, sent, results)]

        limits = {"context_window": context_window, "max_output_tokens": max_output_tokens}
        fit = await self.afit(messages, results, render, tools=tools, question=question, **limits)
        return BudgetResult(fit.messages[len(head) :] if fit.changed else None, fit.report)

    def apply(self, messages: Sequence[ChatMessage], **kwargs: Any) -> BudgetResult:
        """``aapply`` from synchronous code (same keyword arguments)."""
        return asyncio_run(self.aapply(messages, **kwargs))

    # --- steps ----------------------------------------------------------------------------------------
    def _begin(
        self,
        messages: Sequence[ChatMessage],
        results: Mapping[str, SearchResult],
        render: Renderer,
        tools: Sequence[Any] | None,
        context_window: int,
        max_output_tokens: int,
    ) -> BudgetRun:
        thresholds = thresholds_for_window(
            context_window,
            trigger_pct=self.trigger_pct,
            target_pct=self.target_pct,
            min_article_tokens=self.min_article_tokens,
            small_window_tokens=self.small_window_tokens,
        )
        limits = WindowLimits.compute(
            context_window,
            max_output_tokens=max_output_tokens,
            margin_pct=self.safety_margin_pct,
            trigger_pct=thresholds.trigger_pct,
            target_pct=thresholds.target_pct,
        )
        c = BudgetRun(render, tools, self.accountant, limits, thresholds, self.fallback_context_window)
        c.use(messages, results)
        total = c.send()
        fixed = c.fixed_tokens()
        report = BudgetReport(
            context_window=context_window,
            trigger_pct=thresholds.trigger_pct,
            target_pct=thresholds.target_pct,
            trigger_tokens=limits.trigger,
            target_tokens=limits.target,
            safety_margin_pct=self.safety_margin_pct,
            safety_margin_tokens=limits.margin,
            reserved_output_tokens=max_output_tokens,
            hard_limit_tokens=limits.hard_limit,
            fixed_tokens=fixed,
            min_article_tokens=thresholds.min_article_tokens,
            compressor=getattr(self.compressor, "name", type(self.compressor).__name__),
        )
        c.report = report
        c.report.tokens_before = total
        if c.total <= limits.trigger and not self._memory_needed(c) and not c.table.repeats:
            c.report.path.append("under_trigger")
            c.done = True
        return c

    def _memory_needed(self, c: BudgetRun) -> bool:
        lead, cut = self.memory.cut_index(c.messages[: c.q_idx])
        if cut <= lead:
            return False
        turn = {k for m in c.messages[c.q_idx :] if (k := call_id(m))}
        current = sum(s.original_tokens for k in turn for s in c.table.slots.get(k, ()))
        if c.total - current > self.memory_trigger_pct * c.limits.context_window:
            return True
        # History crowds out the current material: even a minimal article would not fit the target.
        need = min(current, c.thresholds.min_article_tokens)
        return c.total > c.limits.trigger and c.total - current + need > c.limits.target

    def _use_memory(self, c: BudgetRun, result: MemoryResult) -> None:
        if result.summarized_messages == 0:
            return
        c.use([*result.messages, *c.messages[c.q_idx :]], c.results)
        c.memory_changed = True
        c.report.memory_summarized_messages = result.summarized_messages
        c.path("memory_summarized")
        logger.info("summarized %d earlier messages (%s)", result.summarized_messages, result.method)
        c.done = c.send() <= c.limits.trigger

    def _result(self, c: BudgetRun) -> Fit:
        report = c.close(self.default_article_tokens, self.max_articles_per_call)
        if self.cap is not None:
            self.cap.set(report.article_cap)
        dispatcher.event(ContextBudgetEvent(report=report))
        logger.info(
            "context budget: %s, %d -> %d tokens of %d (hard limit %d) in %.1f ms",
            "+".join(report.path) or "unchanged",
            report.tokens_before,
            report.tokens_after,
            report.context_window,
            report.hard_limit_tokens,
            report.duration_ms,
        )
        changed = c.memory_changed or c.rewritten or bool(c.removed)
        shown = c.table.shown(c.removed_calls())
        return Fit(c.sent, c.conversation(), dict(c.sent_results), shown, c.total, report, changed)
