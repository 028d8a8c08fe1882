"""One run of the context budget: the conversation and its articles, planned, rendered and counted.

A ``BudgetRun`` holds what one LLM call's budget decides: the messages (and which were removed), the
``ArticleTable`` of their search results, and the prompt as the renderer writes it with its count. Its
steps are the budget's: ``plan`` (dedup, re-rank, allocate by rank, on a skeleton prompt counted as
rendered), ``finish`` (take the compressor's outputs, counted and cut to their targets) and ``enforce``
(the one guard: while the rendered prompt passes the hard limit, cut or drop the worst article, then old
history, then earlier tool-call groups of the current turn).

Example:
    >>> run = BudgetRun(render, tools, accountant, limits, thresholds)  # doctest: +SKIP
    >>> run.use(messages, results); run.send() <= limits.hard_limit     # doctest: +SKIP
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole

from ragidx.article import NORMALIZED_RANK, Article, SearchResult
from ragidx.budget.accounting import PromptAccountant, WindowLimits
from ragidx.budget.allocation import (
    BudgetThresholds,
    adaptive_min_tokens,
    allocate_article_budgets,
    suggest_article_cap,
)
from ragidx.budget.articles import ArticleTable, Entry
from ragidx.budget.messages import call_id, current_turn_start, group_spans
from ragidx.budget.report import BudgetReport, ContextWindowTooSmallError

__all__ = ["BudgetRun", "Renderer"]

logger = logging.getLogger(__name__)

Renderer = Callable[[Sequence[ChatMessage], Mapping[str, SearchResult], Sequence[Article]], list[ChatMessage]]
"""``(conversation, results as sent, articles shown in full best first) -> the messages sent``."""

_SLACK_PER_ARTICLE = 2
_PLAN_ROUNDS = 8
"""Allocation rounds: each drops the worse half of the articles the last one could not fund and re-plans."""
_ACTED = frozenset({"deduplicated", "compressed", "truncated", "dropped", "history_dropped", "tool_calls_dropped"})


class BudgetRun:
    """The state of one budget run and its steps (see the module docstring)."""

    report: BudgetReport
    messages: list[ChatMessage]
    q_idx: int
    results: Mapping[str, SearchResult]
    table: ArticleTable
    sent: list[ChatMessage]
    sent_results: Mapping[str, SearchResult]
    total: int

    def __init__(
        self,
        render: Renderer,
        tools: Sequence[Any] | None,
        accountant: PromptAccountant,
        limits: WindowLimits,
        thresholds: BudgetThresholds,
        fallback_context_window: int | None = None,
    ) -> None:
        self.render, self.tools, self.acc, self.tokens = render, tools, accountant, accountant.tokens
        self.limits, self.thresholds, self.fallback_context_window = limits, thresholds, fallback_context_window
        self.started = time.perf_counter()
        self.removed: set[int] = set()
        self.rewritten = self.memory_changed = self.done = False

    def use(self, messages: Sequence[ChatMessage], results: Mapping[str, SearchResult]) -> None:
        """Budget ``messages``; their search results with articles (by call id) make the article table."""
        self.messages, self.q_idx, self.results = list(messages), current_turn_start(messages), results
        live = [k for m in self.messages if (k := call_id(m)) and k in results and results[k].articles]
        self.table = ArticleTable({k: results[k] for k in live}, self.tokens)

    def fixed_tokens(self) -> int:
        """The prompt with no material (after ``send``): system messages, the question and what the renderer
        adds (system prompt, instruction), as rendered. Raises ``ContextWindowTooSmallError`` if it can't fit."""
        msgs, q = self.messages, self.q_idx
        parts = [m for m in msgs[:q] if m.role == MessageRole.SYSTEM] + msgs[q:][:1]
        # Before any material arrives the prompt is its fixed part: counted once, by ``send``.
        same = len(parts) == len(msgs) and not self.rewritten
        fixed = self.total if same else self.acc.count_prompt(self.render(parts, {}, []), tools=self.tools)
        if fixed > self.limits.hard_limit:
            tool_tokens = self.acc.count_tools(self.tools)
            question_tokens = self.acc.count_message(msgs[q]) if q < len(msgs) else 0
            raise ContextWindowTooSmallError(
                context_window=self.limits.context_window,
                system_tokens=fixed - tool_tokens - question_tokens,
                tool_tokens=tool_tokens,
                question_tokens=question_tokens,
                reserved_output_tokens=self.limits.max_output_tokens,
                safety_margin_tokens=self.limits.margin,
                fallback_context_window=self.fallback_context_window,
            )
        return fixed

    def removed_calls(self) -> set[str]:
        return {k for i in self.removed if (k := call_id(self.messages[i]))}

    def conversation(self) -> list[ChatMessage]:
        return [m for i, m in enumerate(self.messages) if i not in self.removed]

    def send(self) -> int:
        """Render (the table's results once rewritten, else the results as they came) and count it."""
        gone = self.removed_calls()
        results = self.table.results(gone) if self.rewritten else self.table.originals
        self.sent = self.render(self.conversation(), results, self.table.shown(gone))
        self.sent_results, self.total = results, self.acc.count_prompt(self.sent, tools=self.tools)
        return self.total

    def path(self, step: str) -> None:
        if step not in self.report.path:
            self.report.path.append(step)

    # --- steps ----------------------------------------------------------------------------------------
    def plan(self) -> list[tuple[Entry, int]]:
        """Dedup, re-rank, allocate. Returns the compression jobs ``(entry, target_tokens)``."""
        if not self.table.entries:
            return []  # nothing to rewrite: the tool messages are sent as they came
        self.rewritten = True
        if self.table.repeats:
            self.path("deduplicated")
        entries = self.table.ranked()
        self.report.article_tokens_before = sum(e.raw_tokens for e in entries)
        min_tokens, dropped = self.thresholds.min_article_tokens, set[str]()
        for _ in range(_PLAN_ROUNDS):
            alive = [e for e in entries if e.key not in dropped]
            # Skeleton: the prompt with every surviving article's content empty, its metadata as if compressed.
            for e in entries:
                e.set("", 0, "dropped" if e.key in dropped else "compressed")
                e.allocated = 0 if e.key in dropped else None
            skeleton = self.send() + _SLACK_PER_ARTICLE * len(alive)
            for e in alive:
                e.set(e.article.content, e.raw_tokens, "kept")
            raw_total = sum(e.raw_tokens for e in alive)
            # The target is a goal, the hard limit the guarantee: rather than drop everything because the
            # target is full, let the best article's minimum use the room up to the hard limit.
            need = min(raw_total, min_tokens)
            budget = max(0, self.limits.target - skeleton, min(need, self.limits.hard_limit - skeleton))
            self.report.article_budget = budget
            if raw_total <= budget:
                return []
            min_eff = self.report.min_article_tokens = adaptive_min_tokens(budget, len(alive), min_tokens)
            ranks = [float(e.article.metadata[NORMALIZED_RANK]) for e in alive]
            alloc = allocate_article_budgets(ranks, [e.raw_tokens for e in alive], budget, min_tokens=min_tokens)
            unfunded = [e for e, a in zip(alive, alloc, strict=True) if a <= 0]
            if not unfunded or len(unfunded) == len(alive):
                break
            # Dropped articles leave the prompt with their metadata: drop the worse half of the unfunded ones
            # and plan again, with the room their metadata took (on a small window, most of the prompt).
            dropped |= {e.key for e in sorted(unfunded, key=lambda e: -e.rank)[: (len(unfunded) + 1) // 2]}
        jobs: list[tuple[Entry, int]] = []
        for e, a in zip(alive, alloc, strict=True):
            e.allocated = a
            if a <= 0:
                e.set("", 0, "dropped")
            elif a < e.raw_tokens:
                jobs.append((e, a))
        best, lost = alive[0], sum(e.status == "dropped" for e in entries)
        if best.allocated is not None and (best.allocated < min(best.raw_tokens, min_eff) or lost):
            self.recommend_fallback(
                f"best article {best.key!r} gets {best.allocated} of its {best.raw_tokens} tokens "
                f"(minimum {min_eff}); {lost} of {len(entries)} articles dropped"
            )
        return jobs

    def finish(self, jobs: list[tuple[Entry, int]], outputs: Sequence[str | BaseException]) -> None:
        """Take the compressor's outputs (counted; cut to the target when over it, empty or failed),
        render and count the prompt, and enforce the hard limit."""
        for (e, target), out in zip(jobs, outputs, strict=True):
            text, reason = (out, None) if isinstance(out, str) and out.strip() else (e.article.content, "empty")
            if isinstance(out, BaseException):
                logger.warning("compressor failed on %s, truncating: %s", e.key, out)
                reason = f"error: {type(out).__name__}"
            elif reason is None and self.tokens.count(text) > target:
                reason = "overshoot"
            text = self.tokens.truncate(text, target) if reason else text
            e.set(text, self.tokens.count(text), "truncated" if reason else "compressed")
            e.fallback_reason = reason
        if self.send() > self.limits.hard_limit:
            self.enforce()
        for status in ("compressed", "truncated", "dropped"):
            if any(e.status == status for e in self.table.entries.values()):
                self.path(status)
        if self.rewritten and not _ACTED.intersection(self.report.path):
            self.path("rewritten")
        if not self.rewritten and not self.memory_changed and not self.removed:
            self.path("nothing_to_compress")

    def enforce(self) -> None:
        """While the prompt as rendered passes the hard limit: cut or drop the worst articles, then remove
        old history, then earlier tool-call groups of the current turn."""
        hard = self.limits.hard_limit
        while self.total > hard and self.rewritten and self.table.cut_worst(self.total - hard):
            self.send()
        if self.total > hard and any(e.status == "dropped" for e in self.table.entries.values()):
            self.recommend_fallback("all articles had to be dropped to fit the window")
        history, turn = group_spans(self.messages, 0, self.q_idx), group_spans(self.messages, self.q_idx + 1)
        for spans, step in ((history, "history_dropped"), (turn, "tool_calls_dropped")):
            freed = 0  # estimated tokens of the messages removed since the last count
            for span in spans:
                if self.total - freed <= hard:
                    break
                if all(self.messages[i].role == MessageRole.SYSTEM for i in span):
                    continue
                self.removed.update(span)
                self.path(step)
                freed += sum(self.acc.count_message(self.messages[i]) for i in span)
                if self.total - freed <= hard:  # enough by the estimate: render and count what is left
                    self.table.reassign(self.removed_calls())
                    self.send()
                    freed = 0
            if freed:
                self.table.reassign(self.removed_calls())
                self.send()

    def close(self, default_article_tokens: int, max_articles: int | None) -> BudgetReport:
        """The report, completed: what was sent, per article, and how many articles the next search may add."""
        report, entries = self.report, [e for e in self.table.entries.values() if e.status != "dropped"]
        entries = entries if self.rewritten else []
        report.tokens_after = self.total
        report.articles = self.table.outcomes() if self.rewritten else []
        report.article_tokens_after = sum(e.tokens for e in entries)
        kept = [e.tokens for e in entries if e.tokens]
        per_article = int(sum(kept) / len(kept)) if kept else default_article_tokens
        report.available_tokens = max(0, self.limits.target - self.total)
        report.article_cap = suggest_article_cap(
            report.available_tokens,
            per_article_tokens=max(self.thresholds.min_article_tokens, per_article),
            max_articles=max_articles,
        )
        report.duration_ms = (time.perf_counter() - self.started) * 1000
        return report

    def recommend_fallback(self, reason: str) -> None:
        fallback = self.fallback_context_window
        if fallback is None or fallback <= self.limits.context_window or self.report.fallback_recommended:
            return
        self.report.fallback_recommended = True
        self.report.fallback_reason = f"{reason}; a fallback model with a {fallback}-token window is configured"
        self.path("fallback_recommended")
        logger.warning("context budget recommends the fallback model: %s", reason)
