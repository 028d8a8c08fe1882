"""The context budget hook: run it before every LLM call of the agent.

``ContextBudget.apply(messages, ...)`` deduplicates the articles of all ``retrieve_context`` results,
re-normalizes their ranks, compresses them in proportion to rank when the prompt passes the trigger,
folds old turns into a summary when the conversation grows, and guarantees the prompt fits.

Invariants (tested):

- Returns new messages and never edits the input ones; ``messages`` is ``None`` when nothing changed.
- An assistant tool-call message and its tool results are kept or removed together, never split.
- Within each tool message the order of articles is kept. An article repeated in a later tool result
  becomes ``{"kb_id", "title", "url", "see_above": true}``; its full copy is the best-scored one.
- Compressed articles carry ``compressed: true``, ``original_tokens`` and ``tokens`` in metadata; each
  rewritten tool message's metadata carries ``tokens_saved`` and ``compressed_articles_count``.
- Non-JSON and error-shaped tool messages are never rewritten.
- The counted prompt + safety margin + reserved output never exceeds the window: whatever the
  compressor returns is re-counted and truncated, worst-ranked articles are dropped, then old history,
  then earlier tool-call groups of the current turn. Only when the fixed part (system prompt + tool
  schemas + current question + reserved output + margin) can't fit is ``ContextWindowTooSmallError``
  raised.

Example:
    >>> budget = ContextBudget()
    >>> result = budget.apply([], system_prompt="Be brief.", context_window=8192, max_output_tokens=512)
    >>> (result.messages, result.report.path)
    (None, ['under_trigger'])
"""

from __future__ import annotations

import copy
import logging
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.instrumentation import get_dispatcher

from ragidx.article import ARTICLE_RANK, NORMALIZED_RANK, Article
from ragidx.budget.accounting import ContentCounter, PromptAccountant, WindowLimits
from ragidx.budget.allocation import (
    SMALL_WINDOW_TOKENS,
    BudgetThresholds,
    adaptive_min_tokens,
    allocate_article_budgets,
    suggest_article_cap,
    thresholds_for_window,
)
from ragidx.budget.cap import RetrievalCap
from ragidx.budget.compressor import ArticleCompressor, acompress_many, compress_many
from ragidx.budget.dedup import article_key, dedupe_keyed
from ragidx.budget.extractive import ExtractiveCompressor
from ragidx.budget.memory import ConversationMemory, MemoryResult
from ragidx.budget.messages import (
    current_turn_start,
    dump_payload,
    group_spans,
    message_text,
    parse_tool_payload,
    replace_text,
)
from ragidx.budget.report import (
    ArticleOutcome,
    ArticleStatus,
    BudgetReport,
    ContextBudgetEvent,
    ContextWindowTooSmallError,
)
from ragidx.providers.tokenizer import TokenCounter

__all__ = ["REFERENCE_KEY", "BudgetResult", "ContextBudget"]

logger = logging.getLogger(__name__)
dispatcher = get_dispatcher(__name__)

REFERENCE_KEY = "see_above"
_MIN_USEFUL_TOKENS = 16
_TRIM_SLACK = 4
_SLACK_PER_ARTICLE = 2
_PLAN_ROUNDS = 8
"""Allocation rounds: each drops the worse half of the articles the last one could not fund and re-plans."""
_ACTED = frozenset({"deduplicated", "compressed", "truncated", "dropped", "history_dropped", "tool_calls_dropped"})


_JSON_ESCAPED = re.compile(r'[\x00-\x1f"\\]')
_TOKENS_PER_ESCAPE = 0.75
"""Extra tokens per character that JSON escapes (newline, quote, backslash): 0.59-0.74 measured on
the four bundled knowledge bases; the estimate errs high, and the final count is exact anyway."""


def _escape_tokens(text: str) -> int:
    """Estimated extra tokens of ``text`` inside a JSON string (counting it escaped costs a full pass)."""
    return math.ceil(_TOKENS_PER_ESCAPE * len(_JSON_ESCAPED.findall(text)))


@dataclass(frozen=True)
class BudgetResult:
    """New messages (``None`` when nothing changed) and the report of what was done."""

    messages: list[ChatMessage] | None
    report: BudgetReport

    @property
    def changed(self) -> bool:
        return self.messages is not None


@dataclass
class _Entry:
    """One unique article after dedup, and what the budget made of it."""

    key: str
    article: dict[str, Any]
    rank: float
    article_rank: int
    raw_tokens: int
    content: str
    tokens: int
    status: ArticleStatus = "kept"
    allocated: int | None = None
    fallback_reason: str | None = None


@dataclass
class _Slot:
    key: str
    ref: bool
    original_tokens: int


@dataclass
class _Run:
    messages: list[ChatMessage]
    system_prompt: str | None
    tools: Sequence[Any] | None
    question: str
    limits: WindowLimits
    thresholds: BudgetThresholds
    report: BudgetReport
    started: float
    base: int
    counts: list[int]
    q_idx: int
    changed: set[int] = field(default_factory=set)
    removed: set[int] = field(default_factory=set)
    payloads: dict[int, dict[str, Any]] = field(default_factory=dict)
    slots: dict[int, list[_Slot]] = field(default_factory=dict)
    entries: dict[str, _Entry] = field(default_factory=dict)
    memory_changed: bool = False
    memory_needed: bool = False
    done: bool = False

    @property
    def total(self) -> int:
        return self.base + sum(c for i, c in enumerate(self.counts) if i not in self.removed)

    def path(self, step: str) -> None:
        if step not in self.report.path:
            self.report.path.append(step)


class ContextBudget:
    """Keeps every LLM call of the agent inside its context window.

    Cheap to build: nothing loads until the first call. Call it before each LLM call with the
    messages about to be sent (see the module docstring for its invariants)::

        budget = ContextBudget(compressor=ExtractiveCompressor(), cap=cap, fallback_context_window=32768)
        result = budget.apply(messages, system_prompt=sp, tools=tools, context_window=8192,
                              max_output_tokens=512)
        if result.report.fallback_recommended: ...  # switch to the larger model, re-apply
        messages = result.messages or messages

    Args:
        token_counter: Counts tokens (default tiktoken ``cl100k_base``); shared by the accountant and the
            default compressor.
        compressor: Any ``ArticleCompressor``; default ``ExtractiveCompressor``.
        summarizer_llm: LLM for summarizing old turns; without it memory is extractive.
        memory: A ready ``ConversationMemory`` (overrides ``summarizer_llm``).
        trigger_pct / target_pct: Act above ``trigger_pct`` of the window, aim at ``target_pct``
            (lowered to 75% / 70% for windows under ``small_window_tokens``).
        min_article_tokens: Per-article minimum (adapted down for small windows and budgets).
        safety_margin_pct: Share of the window kept free because the model's tokenizer differs.
        memory_trigger_pct: Summarize old turns when the conversation passes this share of the window.
        fallback_context_window: Window of a configured larger model; enables ``fallback_recommended``.
        cap: A ``RetrievalCap`` the hook sets after each run for the retrieve tool to read.
        max_articles_per_call: Upper bound of the cap (the tool's usual ``top_k``).
        max_concurrency: Concurrent compressions in ``aapply``.
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
        self.content_tokens = ContentCounter(self.tokens)
        # The default compressor fits contents in tokens as sent; another gets targets less its escapes.
        self.compressor: ArticleCompressor = compressor or ExtractiveCompressor(self.content_tokens)
        self._targets_as_sent = compressor is None
        self.memory = memory or ConversationMemory(summarizer_llm, self.tokens)
        self.trigger_pct = trigger_pct
        self.target_pct = target_pct
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
            trigger_pct=settings.budget_trigger_pct,
            target_pct=settings.budget_target_pct,
            min_article_tokens=settings.budget_min_article_tokens,
            safety_margin_pct=settings.budget_safety_margin_pct,
            memory_trigger_pct=settings.memory_trigger_pct,
            fallback_context_window=fallback.context_window if fallback is not None else None,
            cap=cap,
            max_articles_per_call=settings.top_k,
        )

    # --- public API -----------------------------------------------------------------------------------
    @dispatcher.span
    def apply(
        self,
        messages: Sequence[ChatMessage],
        *,
        system_prompt: str | None = None,
        tools: Sequence[Any] | None = None,
        question: str | None = None,
        context_window: int,
        max_output_tokens: int,
    ) -> BudgetResult:
        """Budget ``messages`` for one call; see the module docstring for the guarantees.

        Raises:
            ContextWindowTooSmallError: The fixed part of the prompt cannot fit the window.
        """
        run = self._begin(messages, system_prompt, tools, question, context_window, max_output_tokens)
        if not run.done and run.memory_needed:
            history, kwargs = self._memory_args(run)
            self._apply_memory(run, self.memory.summarize(history, **kwargs))
        if not run.done:
            jobs = self._plan(run)
            articles, targets = self._job_inputs(run, jobs)
            outputs = compress_many(self.compressor, articles, targets, run.question) if jobs else []
            self._finish(run, jobs, outputs)
        return self._result(run)

    @dispatcher.span
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
        """``apply`` with concurrent compression and async memory summarization."""
        run = self._begin(messages, system_prompt, tools, question, context_window, max_output_tokens)
        if not run.done and run.memory_needed:
            history, kwargs = self._memory_args(run)
            self._apply_memory(run, await self.memory.asummarize(history, **kwargs))
        if not run.done:
            jobs = self._plan(run)
            articles, targets = self._job_inputs(run, jobs)
            outputs = (
                await acompress_many(
                    self.compressor, articles, targets, run.question, max_concurrency=self.max_concurrency
                )
                if jobs
                else []
            )
            self._finish(run, jobs, outputs)
        return self._result(run)

    # --- steps ----------------------------------------------------------------------------------------
    def _begin(
        self,
        messages: Sequence[ChatMessage],
        system_prompt: str | None,
        tools: Sequence[Any] | None,
        question: str | None,
        context_window: int,
        max_output_tokens: int,
    ) -> _Run:
        started = time.perf_counter()
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
        msgs = list(messages)
        acc = self.accountant
        counts = [acc.count_message(m) for m in msgs]
        q_idx = current_turn_start(msgs)
        system_tokens = (
            acc.reply_priming
            + acc.count_system(system_prompt)
            + sum(c for m, c in zip(msgs, counts, strict=True) if m.role == MessageRole.SYSTEM)
        )
        tool_tokens = acc.count_tools(tools)
        question_tokens = counts[q_idx] if q_idx < len(msgs) else 0
        fixed = system_tokens + tool_tokens + question_tokens
        if fixed > limits.hard_limit:
            raise ContextWindowTooSmallError(
                context_window=context_window,
                system_tokens=system_tokens,
                tool_tokens=tool_tokens,
                question_tokens=question_tokens,
                reserved_output_tokens=max_output_tokens,
                safety_margin_tokens=limits.margin,
                fallback_context_window=self.fallback_context_window,
            )
        if question is None:
            question = message_text(msgs[q_idx]) if q_idx < len(msgs) else ""
        base = acc.reply_priming + acc.count_system(system_prompt) + tool_tokens
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
        run = _Run(msgs, system_prompt, tools, question, limits, thresholds, report, started, base, counts, q_idx)
        report.tokens_before = run.total
        run.memory_needed = self._memory_needed(run)
        if run.total <= limits.trigger and not run.memory_needed and not _repeats_articles(msgs):
            report.path.append("under_trigger")
            run.done = True
        return run

    def _memory_needed(self, run: _Run) -> bool:
        lead, cut = self.memory.cut_index(run.messages[: run.q_idx])
        if cut <= lead:
            return False
        turn = range(run.q_idx, len(run.messages))
        current_tools = sum(run.counts[i] for i in turn if run.messages[i].role == MessageRole.TOOL)
        if run.total - current_tools > self.memory_trigger_pct * run.limits.context_window:
            return True
        if run.total <= run.limits.trigger:
            return False
        # History crowds out the current material: even a minimal article would not fit the target.
        article_tokens = 0
        for i in range(run.q_idx, len(run.messages)):
            payload = parse_tool_payload(run.messages[i])
            if payload is not None:
                article_tokens += sum(self.accountant.count_content(a.get("content", "")) for a in payload["articles"])
        need = min(article_tokens, run.thresholds.min_article_tokens)
        return run.total - article_tokens + need > run.limits.target

    def _memory_args(self, run: _Run) -> tuple[list[ChatMessage], dict[str, Any]]:
        size = max(64, min(self.memory.summary_tokens, run.limits.context_window // 10))
        return run.messages[: run.q_idx], {"question": run.question, "summary_tokens": size}

    def _apply_memory(self, run: _Run, result: MemoryResult) -> None:
        if result.summarized_messages == 0:
            return
        run.messages = [*result.messages, *run.messages[run.q_idx :]]
        run.counts = [self.accountant.count_message(m) for m in run.messages]
        run.q_idx = len(result.messages)
        run.memory_changed = True
        run.report.memory_summarized_messages = result.summarized_messages
        run.path("memory_summarized")
        logger.info("summarized %d earlier messages (%s)", result.summarized_messages, result.method)
        if run.total <= run.limits.trigger:
            run.done = True

    def _plan(self, run: _Run) -> list[tuple[_Entry, int]]:
        """Dedup, re-rank, allocate. Returns the compression jobs ``(entry, target_tokens)``."""
        for i, m in enumerate(run.messages):
            payload = parse_tool_payload(m)
            if payload is not None:
                run.payloads[i] = payload
        if not any(p["articles"] for p in run.payloads.values()):
            # Nothing to rewrite: the tool messages are sent as they came, and counted so (re-rendering
            # them here would count a compact copy that is never sent).
            run.payloads.clear()
            return []
        order = sorted(run.payloads)
        seen: set[str] = set()
        for c_idx, i in enumerate(order):
            for a_idx, a in enumerate(run.payloads[i]["articles"]):
                key = article_key(a, f"#{c_idx}:{a_idx}")
                size = self.accountant.count_content(str(a.get("content") or ""))
                run.slots.setdefault(i, []).append(_Slot(key, key in seen, size))
                seen.add(key)
        for key, art in dedupe_keyed([run.payloads[i]["articles"] for i in order]):
            content = str(art.get("content") or "")
            n = self.accountant.count_content(content)
            meta = art["metadata"]
            run.entries[key] = _Entry(key, art, float(meta[NORMALIZED_RANK]), int(meta[ARTICLE_RANK]), n, content, n)
        refs = sum(s.ref for slots in run.slots.values() for s in slots)
        if refs:
            run.path("deduplicated")
        run.changed.update(run.payloads)
        entries = sorted(run.entries.values(), key=lambda e: e.article_rank)
        run.report.article_tokens_before = sum(e.raw_tokens for e in entries)
        dropped_keys: set[str] = set()
        for _ in range(_PLAN_ROUNDS):
            alive = [e for e in entries if e.key not in dropped_keys]
            # Skeleton: the prompt with every surviving article's content empty, its metadata as if compressed.
            for e in entries:
                e.content, e.status = "", ("dropped" if e.key in dropped_keys else "compressed")
                if e.key in dropped_keys:
                    e.tokens, e.allocated = 0, 0
            self._render_all(run)
            skeleton = run.total + _SLACK_PER_ARTICLE * len(alive)
            for e in alive:
                e.content, e.status = str(e.article.get("content") or ""), "kept"
            raw_total = sum(e.raw_tokens for e in alive)
            budget = max(0, run.limits.target - skeleton)
            # The target is a goal, the hard limit the guarantee: rather than drop everything because the
            # target is full, let the best article's minimum use the room up to the hard limit.
            need = min(raw_total, run.thresholds.min_article_tokens)
            budget = max(budget, min(need, run.limits.hard_limit - skeleton))
            run.report.article_budget = budget
            if raw_total <= budget:
                self._render_all(run)
                return []
            min_eff = adaptive_min_tokens(budget, len(alive), run.thresholds.min_article_tokens)
            run.report.min_article_tokens = min_eff
            alloc = allocate_article_budgets(
                [e.rank for e in alive],
                [e.raw_tokens for e in alive],
                budget,
                min_tokens=run.thresholds.min_article_tokens,
            )
            unfunded = [e for e, a in zip(alive, alloc, strict=True) if a <= 0]
            if not unfunded or len(unfunded) == len(alive):
                break
            # Dropped articles leave the prompt with their metadata: drop the worse half of the unfunded ones
            # and plan again, with the room their metadata took (on a small window, most of the prompt).
            worst = sorted(unfunded, key=lambda e: -e.article_rank)[: (len(unfunded) + 1) // 2]
            dropped_keys |= {e.key for e in worst}
        everything, entries = entries, alive
        jobs: list[tuple[_Entry, int]] = []
        for e, a in zip(entries, alloc, strict=True):
            e.allocated = a
            if a <= 0:
                e.status, e.content, e.tokens = "dropped", "", 0
            elif a < e.raw_tokens:
                jobs.append((e, a))
        best = entries[0]
        dropped = [e for e in everything if e.status == "dropped"]
        if best.allocated is not None and (best.allocated < min(best.raw_tokens, min_eff) or dropped):
            self._recommend_fallback(
                run,
                f"best article {best.key!r} gets {best.allocated} of its {best.raw_tokens} tokens "
                f"(minimum {min_eff}); {len(dropped)} of {len(everything)} articles dropped",
            )
        return jobs

    def _job_inputs(self, run: _Run, jobs: list[tuple[_Entry, int]]) -> tuple[list[Article], list[int]]:
        articles = [Article.from_dict({**e.article, "kb_id": e.article.get("kb_id") or e.key}) for e, _ in jobs]
        if self._targets_as_sent:
            return articles, [t for _, t in jobs]
        # A compressor passed in counts plain text: leave room for the quotes and the escapes its share
        # of the content will need (its result is counted as sent, and cut if over).
        return articles, [
            max(1, t - 2 - math.ceil(_escape_tokens(e.content) * t / max(1, e.raw_tokens))) for e, t in jobs
        ]

    def _finish(self, run: _Run, jobs: list[tuple[_Entry, int]], outputs: Sequence[str | BaseException]) -> None:
        for (e, target), out in zip(jobs, outputs, strict=True):
            original = str(e.article.get("content") or "")
            if isinstance(out, BaseException):
                e.fallback_reason = f"error: {type(out).__name__}"
                logger.warning("compressor failed on %s, truncating: %s", e.key, out)
                text = self.content_tokens.truncate(original, target)
            elif not isinstance(out, str) or not out.strip():
                e.fallback_reason = "empty"
                text = self.content_tokens.truncate(original, target)
            else:
                text = out
                if self.content_tokens.count(text) > target:
                    e.fallback_reason = "overshoot"
                    text = self.content_tokens.truncate(text, target)
            e.content, e.tokens = text, self.content_tokens.count(text)
            e.status = "truncated" if e.fallback_reason else "compressed"
        if run.payloads:
            self._render_all(run)
        self._enforce(run)
        for e in run.entries.values():
            if e.status in ("compressed", "truncated", "dropped"):
                run.path(e.status)
        if run.payloads and not _ACTED.intersection(run.report.path):
            run.path("rewritten")
        if not run.payloads and not run.memory_changed and not run.removed:
            run.path("nothing_to_compress")

    def _enforce(self, run: _Run) -> None:
        """Last resort: trim or drop worst articles, then history, then earlier tool-call groups."""
        hard = run.limits.hard_limit
        while run.total > hard:
            alive = [e for e in run.entries.values() if e.status != "dropped" and e.content]
            if not alive:
                break
            worst = max(alive, key=lambda e: e.article_rank)
            keep = worst.tokens - (run.total - hard) - _TRIM_SLACK
            if keep < _MIN_USEFUL_TOKENS:
                worst.status, worst.content, worst.tokens = "dropped", "", 0
            else:
                worst.content = self.content_tokens.truncate(worst.content, keep)
                worst.tokens = self.content_tokens.count(worst.content)
                worst.status = "truncated" if worst.status != "compressed" else worst.status
                worst.fallback_reason = worst.fallback_reason or "over_window"
            self._render_all(run)
        if run.total > hard and any(e.status == "dropped" for e in run.entries.values()):
            self._recommend_fallback(run, "all articles had to be dropped to fit the window")
        if run.total > hard:
            for span in group_spans(run.messages, 0, run.q_idx):
                if run.total <= hard:
                    break
                if all(run.messages[i].role == MessageRole.SYSTEM for i in span):
                    continue
                run.removed.update(span)
                run.path("history_dropped")
                if run.payloads.keys() & set(span):
                    # A later repeat of an article shown only in the removed messages must now show it.
                    self._reassign_references(run)
                    self._render_all(run)
        if run.total > hard:
            for span in group_spans(run.messages, run.q_idx + 1):
                if run.total <= hard:
                    break
                if all(run.messages[i].role == MessageRole.SYSTEM for i in span):
                    continue
                run.removed.update(span)
                run.path("tool_calls_dropped")

    def _reassign_references(self, run: _Run) -> None:
        """The first occurrence of each article in a message still sent holds it; later ones refer to it."""
        seen: set[str] = set()
        for i in sorted(run.slots):
            if i in run.removed:
                continue
            for slot in run.slots[i]:
                slot.ref = slot.key in seen
                seen.add(slot.key)

    def _recommend_fallback(self, run: _Run, reason: str) -> None:
        fallback = self.fallback_context_window
        if fallback is None or fallback <= run.limits.context_window or run.report.fallback_recommended:
            return
        run.report.fallback_recommended = True
        run.report.fallback_reason = f"{reason}; a fallback model with a {fallback}-token window is configured"
        run.path("fallback_recommended")
        logger.warning("context budget recommends the fallback model: %s", reason)

    # --- rendering ------------------------------------------------------------------------------------
    def _render_all(self, run: _Run) -> None:
        for i in run.payloads:
            if i in run.removed:
                continue
            run.messages[i], contents = self._render(run, i)
            run.counts[i] = self.accountant.count_message(run.messages[i], contents=contents)

    def _render(self, run: _Run, i: int) -> tuple[ChatMessage, list[str]]:
        """Tool message ``i`` rewritten, and the contents of the articles it carries."""
        source = run.payloads[i]
        payload = {k: v for k, v in source.items() if k not in ("articles", "metadata")}
        articles: list[dict[str, Any]] = []
        saved = compressed = dropped = references = 0
        for slot in run.slots.get(i, []):
            e = run.entries[slot.key]
            if e.status == "dropped":
                dropped += 0 if slot.ref else 1
                saved += slot.original_tokens
                continue
            if slot.ref:
                references += 1
                saved += slot.original_tokens
                articles.append(
                    {
                        "kb_id": e.article.get("kb_id", ""),
                        "title": e.article.get("title", ""),
                        "url": e.article.get("url", ""),
                        REFERENCE_KEY: True,
                    }
                )
                continue
            art = {k: v for k, v in e.article.items() if k != "metadata"}
            art["content"] = e.content
            meta = dict(e.article.get("metadata") or {})
            if e.status in ("compressed", "truncated"):
                meta.update(compressed=True, original_tokens=e.raw_tokens, tokens=e.tokens)
                compressed += 1
            saved += max(0, slot.original_tokens - e.tokens)
            art["metadata"] = meta
            articles.append(art)
        payload["articles"] = articles
        meta_in = source.get("metadata")
        meta_out: dict[str, Any] = copy.deepcopy(meta_in) if isinstance(meta_in, dict) else {}
        meta_out.update(tokens_saved=saved, compressed_articles_count=compressed)
        if dropped:
            meta_out["articles_dropped"] = dropped
        if references:
            meta_out["references_count"] = references
        payload["metadata"] = meta_out
        contents = [a["content"] for a in articles if "content" in a]
        return replace_text(run.messages[i], dump_payload(payload)), contents

    # --- result ---------------------------------------------------------------------------------------
    def _result(self, run: _Run) -> BudgetResult:
        report = run.report
        total = run.total
        report.tokens_after = total
        for e in sorted(run.entries.values(), key=lambda e: e.article_rank):
            report.articles.append(
                ArticleOutcome(
                    kb_id=e.key,
                    title=str(e.article.get("title") or ""),
                    normalized_rank=e.rank,
                    article_rank=e.article_rank,
                    tokens_before=e.raw_tokens,
                    allocated=e.allocated,
                    tokens_after=e.tokens if e.status != "dropped" else 0,
                    status=e.status,
                    fallback_reason=e.fallback_reason,
                )
            )
        for slots in run.slots.values():
            for s in slots:
                if s.ref:
                    e = run.entries[s.key]
                    report.articles.append(
                        ArticleOutcome(
                            kb_id=s.key,
                            title=str(e.article.get("title") or ""),
                            normalized_rank=e.rank,
                            article_rank=e.article_rank,
                            tokens_before=s.original_tokens,
                            tokens_after=0,
                            status="reference",
                        )
                    )
        report.article_tokens_after = sum(e.tokens for e in run.entries.values() if e.status != "dropped")
        kept = [e.tokens for e in run.entries.values() if e.status != "dropped" and e.tokens]
        per_article = max(
            run.thresholds.min_article_tokens,
            int(sum(kept) / len(kept)) if kept else self.default_article_tokens,
        )
        report.available_tokens = max(0, run.limits.target - total)
        report.article_cap = suggest_article_cap(
            report.available_tokens, per_article_tokens=per_article, max_articles=self.max_articles_per_call
        )
        if self.cap is not None:
            self.cap.set(report.article_cap)
        report.duration_ms = (time.perf_counter() - run.started) * 1000
        changed = run.memory_changed or bool(run.changed) or bool(run.removed)
        messages = [m for i, m in enumerate(run.messages) if i not in run.removed] if changed else None
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
        return BudgetResult(messages, report)


def _repeats_articles(messages: Sequence[ChatMessage]) -> bool:
    """Whether any kb_id occurs more than once across the retrieve_context results: dedup is always worth it."""
    seen: set[str] = set()
    for m in messages:
        payload = parse_tool_payload(m)
        for a in payload["articles"] if payload else ():
            kb_id = a.get("kb_id")
            if kb_id in (None, "") or a.get(REFERENCE_KEY):
                continue
            if kb_id in seen:
                return True
            seen.add(str(kb_id))
    return False
