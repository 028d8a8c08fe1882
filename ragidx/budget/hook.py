"""The context budget hook: run it before every LLM call of the agent.

``ContextBudget.fit(messages, results, render, ...)`` takes the conversation, its search results as
objects (``SearchResult`` by tool-call id) and a renderer that writes the prompt as it is sent. It
deduplicates the articles, re-normalizes their ranks, compresses them in proportion to rank when the
prompt passes the trigger, folds old turns into a summary when the conversation grows, renders the prompt
and counts it: that count is the one guard of the window. (``ragidx.agent.budgeted_llm.BudgetedLLM`` runs
it on a conversation that arrives as messages, inside LlamaIndex's own agents.)

Invariants (tested):

- Returns new messages and never edits the input ones; ``Fit.changed`` is false when nothing changed.
- An assistant tool-call message and its tool results are kept or removed together, never split.
- Within each tool result the order of articles is kept. An article repeated in a later result becomes
  ``{"kb_id", "title", "url", "see_above": true}``; its full copy is the best-scored one.
- Compressed articles carry ``compressed: true``, ``original_tokens`` and ``tokens`` in metadata; each
  rewritten result's metadata carries ``tokens_saved`` and ``compressed_articles_count``.
- Tool messages that are not search results with articles are never rewritten.
- With ``relevance_floor`` > 0, articles scored under that share of the best one are left out (status
  ``dropped``, ``fallback_reason`` ``below_relevance_floor``), even when they fit; the best never is.
- The counted prompt (as rendered) + safety margin + reserved output never exceeds the window: whatever
  the compressor returns is counted and cut, worst-ranked articles are cut or dropped, then old history,
  then earlier tool-call groups of the current turn. Only when the fixed part (system prompt + tool
  schemas + current question + reserved output + margin) can't fit is ``ContextWindowTooSmallError`` raised.

Example:
    >>> budget = ContextBudget()
    >>> fit = budget.fit([], {}, lambda conversation, results, articles: list(conversation),
    ...                  context_window=8192, max_output_tokens=512)
    >>> (fit.changed, fit.report.path)
    (False, ['under_trigger'])
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.instrumentation import get_dispatcher

from ragidx.article import Article, SearchResult
from ragidx.budget.accounting import PromptAccountant
from ragidx.budget.allocation import SMALL_WINDOW_TOKENS, WindowLimits
from ragidx.budget.compressor import ArticleCompressor, acompress_many
from ragidx.budget.extractive import ExtractiveCompressor
from ragidx.budget.memory import ConversationMemory
from ragidx.budget.messages import call_id, message_text
from ragidx.budget.report import BudgetReport, ContextBudgetEvent
from ragidx.budget.run import BudgetRun, Renderer
from ragidx.providers.tokenizer import TokenCounter
from ragidx.sync_call import run_sync
from ragidx.tools.cap import RetrievalCap

__all__ = ["ContextBudget", "Fit", "Renderer"]

logger = logging.getLogger(__name__)
dispatcher = get_dispatcher(__name__)


@dataclass(frozen=True)
class Fit:
    """One budgeted call: the messages to send (``tokens`` counts them with the tool schemas), the
    conversation kept (tool messages as they came) and the articles shown in full, best first."""

    messages: list[ChatMessage]
    conversation: list[ChatMessage]
    articles: list[Article]
    tokens: int
    report: BudgetReport
    changed: bool


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
        memory: Folds old turns into a summary; default ``ConversationMemory()`` (extractive: pass one with an
            LLM for written summaries).
        trigger_pct / target_pct: Act above ``trigger_pct`` of the window, aim at ``target_pct``
            (lowered to 75% / 70% for windows under 16K tokens).
        min_article_tokens: Per-article minimum (adapted down for small windows and budgets).
        safety_margin_pct: Share of the window kept free because the model's tokenizer differs.
        memory_trigger_pct: Summarize old turns when the conversation passes this share of the window.
        fallback_context_window: Window of a configured larger model; enables ``fallback_recommended``.
        cap: A ``RetrievalCap`` the hook sets after each run for the retrieve tool to read.
        max_articles_per_call: Upper bound of the cap (the tool's usual ``top_k``).
        relevance_floor: Leave out articles whose ``rerank_score`` is under this share of the best one's,
            even when they fit (0 keeps all; ``Settings.budget_relevance_floor`` says what was measured).
    """

    def __init__(
        self,
        token_counter: TokenCounter | None = None,
        compressor: ArticleCompressor | None = None,
        *,
        memory: ConversationMemory | None = None,
        trigger_pct: float = 0.85,
        target_pct: float = 0.80,
        min_article_tokens: int = 300,
        safety_margin_pct: float = 0.05,
        memory_trigger_pct: float = 0.80,
        fallback_context_window: int | None = None,
        cap: RetrievalCap | None = None,
        max_articles_per_call: int | None = 5,
        relevance_floor: float = 0.0,
    ) -> None:
        if not 0.0 <= relevance_floor < 1.0:
            raise ValueError(f"relevance_floor must be in [0, 1), got {relevance_floor}")
        self.limits = partial(
            WindowLimits.compute,
            margin_pct=safety_margin_pct,
            trigger_pct=trigger_pct,
            target_pct=target_pct,
            min_article_tokens=min_article_tokens,
        )
        self.limits(SMALL_WINDOW_TOKENS, max_output_tokens=0)  # invalid percentages fail here, not at the first call
        self.tokens = token_counter or TokenCounter()
        self.accountant = PromptAccountant(self.tokens)
        self.compressor: ArticleCompressor = compressor or ExtractiveCompressor(self.tokens)
        self.memory = memory or ConversationMemory(token_counter=self.tokens)
        self.memory_trigger_pct = memory_trigger_pct
        self.fallback_context_window = fallback_context_window
        self.cap = cap
        self.max_articles_per_call = max_articles_per_call
        self.relevance_floor = relevance_floor

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
        prompt_cap: int | None = None,
    ) -> Fit:
        """Budget one call: ``results`` are the conversation's search results by tool-call id, ``render``
        writes the prompt as sent. ``prompt_cap`` caps the prompt below the window (an answer-time or cost
        goal): the prompt is compressed to fill it, not to the window's trigger/target percentages. See the
        module docstring for the guarantees.

        Raises:
            ContextWindowTooSmallError: The fixed part of the prompt cannot fit the window.
        """
        limits = self.limits(context_window, max_output_tokens=max_output_tokens).capped(prompt_cap)
        name = getattr(self.compressor, "name", type(self.compressor).__name__)
        fallback = self.fallback_context_window
        run = BudgetRun(
            messages,
            results,
            render,
            tools,
            self.accountant,
            limits,
            fallback_context_window=fallback,
            compressor=name,
            verbatim_compression=getattr(self.compressor, "verbatim", False),
        )
        if question is None:
            question = message_text(messages[run.q_idx]) if run.q_idx < len(messages) else ""
        run.apply_floor(self.relevance_floor)
        fold = self._memory_needed(run)
        if run.total <= limits.trigger and not fold and not run.table.repeats:
            run.path("under_trigger")
        elif not (fold and await self._fold_history(run, question)):
            jobs = run.plan()
            articles, targets = [e.article for e, _ in jobs], [t for _, t in jobs]
            run.finish(jobs, await acompress_many(self.compressor, articles, targets, question))
        return self._result(run)

    def fit(self, *args: Any, **kwargs: Any) -> Fit:
        """``afit`` from synchronous code."""
        return run_sync(self.afit(*args, **kwargs))

    # --- steps ----------------------------------------------------------------------------------------
    def _memory_needed(self, run: BudgetRun) -> bool:
        lead, cut = self.memory.cut_index(run.messages[: run.q_idx])
        if cut <= lead:
            return False
        turn = {k for m in run.messages[run.q_idx :] if (k := call_id(m))}
        current = sum(s.original_tokens for k in turn for s in run.table.slots.get(k, ()))
        if run.total - current > self.memory_trigger_pct * run.limits.context_window:
            return True
        # History crowds out the current material: even a minimal article would not fit the target.
        need = min(current, run.limits.min_article_tokens)
        return run.total > run.limits.trigger and run.total - current + need > run.limits.target

    async def _fold_history(self, run: BudgetRun, question: str) -> bool:
        """Summarize the history before the question; ``True`` when the prompt is then under the trigger."""
        size = max(64, min(self.memory.summary_tokens, run.limits.context_window // 10))
        history = run.messages[: run.q_idx]
        result = await self.memory.asummarize(history, question=question, summary_tokens=size, results=run.results)
        if result.summarized_messages == 0:
            return False
        run.use([*result.messages, *run.messages[run.q_idx :]], run.results)
        run.memory_changed = True
        run.report.memory_summarized_messages = result.summarized_messages
        run.path("memory_summarized")
        logger.info("summarized %d earlier messages (%s)", result.summarized_messages, result.method)
        return run.send() <= run.limits.trigger

    def _result(self, run: BudgetRun) -> Fit:
        report = run.close(self.max_articles_per_call)
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
        changed = run.memory_changed or run.rewritten or bool(run.removed)
        shown = run.table.shown(run.removed_calls())
        return Fit(run.sent, run.conversation(), shown, run.total, report, changed)
