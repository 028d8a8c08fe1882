"""One run of the context budget: the conversation and its articles, planned, rendered and counted.

``ArticleTable`` reads the ``SearchResult`` objects of a conversation (by tool-call id, in the order of
their messages) once: one slot per article occurrence, one entry per unique article (deduplicated and
re-ranked), its first occurrence shown in full and later ones as ``see_above`` references.

A ``BudgetRun`` holds what one LLM call's budget decides (messages removed, articles cut or dropped) and
the prompt as the renderer writes it, with its count. Its steps are ``plan``, ``finish`` and ``enforce``,
the one guard of the hard limit.

Example:
    >>> from ragidx.article import Article, SearchResult
    >>> from ragidx.providers.tokenizer import TokenCounter
    >>> a = Article("a", "A", "", "Text.", metadata={"rerank_score": 0.5})
    >>> table = ArticleTable({"c1": SearchResult((a,)), "c2": SearchResult((a,))}, TokenCounter())
    >>> [[x.metadata.get("see_above", False) for x in r.articles] for r in table.results().values()]
    [[False], [True]]
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole

from ragidx.article import (
    ARTICLE_RANK,
    COMPRESSED_VERBATIM,
    NORMALIZED_RANK,
    RERANK_SCORE,
    SEE_ABOVE,
    Article,
    SearchResult,
)
from ragidx.budget.accounting import PromptAccountant
from ragidx.budget.allocation import WindowLimits, adaptive_min_tokens, allocate_article_budgets, suggest_article_cap
from ragidx.budget.messages import call_id, current_turn_start, group_spans
from ragidx.budget.report import ArticleOutcome, ArticleStatus, BudgetReport, ContextWindowTooSmallError
from ragidx.providers.tokenizer import TokenCounter

__all__ = ["ArticleTable", "BudgetRun", "Entry", "Renderer"]

logger = logging.getLogger(__name__)

Renderer = Callable[[Sequence[ChatMessage], Mapping[str, SearchResult], Sequence[Article]], list[ChatMessage]]
"""``(conversation, results as sent, articles shown in full best first) -> the messages sent``."""

_SLACK_PER_ARTICLE = 2
_DEFAULT_ARTICLE_TOKENS = 1000
"""What the cap assumes a new article costs when no article is shown to measure."""
_MIN_USEFUL_TOKENS = 16
_TRIM_SLACK = 4
_LLM_SELECTED = "flash_rank"
"""Metadata of an article the flash reranker selected (``ragidx.retrieval.flash.reranker.FLASH_RANK``)."""
BELOW_FLOOR = "below_relevance_floor"
"""``fallback_reason`` of an article dropped by the relevance floor (``ArticleTable.drop_below``)."""
_ACTED = frozenset(
    {"below_floor", "deduplicated", "compressed", "truncated", "dropped", "history_dropped", "tool_calls_dropped"}
)


@dataclass
class Entry:
    """One unique article and what the budget made of it (``content`` and ``tokens`` as it is sent)."""

    key: str
    article: Article
    raw_tokens: int
    content: str
    tokens: int
    status: ArticleStatus = "kept"
    allocated: int | None = None
    fallback_reason: str | None = None

    @property
    def rank(self) -> int:
        return int(self.article.metadata[ARTICLE_RANK])

    def set(self, content: str, tokens: int, status: ArticleStatus) -> None:
        self.content, self.tokens, self.status = content, tokens, status


@dataclass
class _Slot:
    key: str
    ref: bool
    original_tokens: int


class ArticleTable:
    """The entries and slots of ``results`` (``{tool_call_id: SearchResult}`` in message order).

    Per key the copy with the highest ``rerank_score`` is the entry (a missing score sorts last), so an
    article ranked high by any search stays high. Entries are ordered best first: by that score, then the
    result's own ``normalized_rank``, then first appearance; each gets a fresh ``normalized_rank`` (0.0 best
    .. 1.0 worst, a lone article 0.0) and ``article_rank`` (0, 1, ...) on a new ``Article``.
    """

    def __init__(
        self, results: Mapping[str, SearchResult], tokens: TokenCounter, *, verbatim_compression: bool = True
    ) -> None:
        self.originals = dict(results)
        self.tokens = tokens
        self.verbatim_compression = verbatim_compression
        self.slots: dict[str, list[_Slot]] = {}
        best: dict[str, tuple[float, float, Article, int]] = {}  # in order of first appearance
        for c, (call, result) in enumerate(self.originals.items()):
            self.slots[call] = []
            for i, a in enumerate(result.articles):
                key = a.kb_id or f"#{c}:{i}"  # articles without a kb_id are never merged
                size = tokens.count(a.content)
                self.slots[call].append(_Slot(key, False, size))
                score = _number(a.metadata.get(RERANK_SCORE), -math.inf)
                if key not in best or score > best[key][0]:
                    best[key] = (score, _number(a.metadata.get(NORMALIZED_RANK), 1.0), a, size)
        self.reassign(())
        # Best first: by score, then the result's own rank, then first appearance (the sort is stable).
        ranked = sorted(best.items(), key=lambda kv: (-kv[1][0], kv[1][1]))
        self.entries: dict[str, Entry] = {}  # best first
        for rank, (key, (score, _, a, size)) in enumerate(ranked):
            meta = {**a.metadata, NORMALIZED_RANK: rank / max(1, len(ranked) - 1), ARTICLE_RANK: rank}
            if math.isfinite(score):
                meta[RERANK_SCORE] = score
            self.entries[key] = Entry(key, replace(a, metadata=meta), size, a.content, size)

    @property
    def repeats(self) -> bool:
        return any(s.ref for slots in self.slots.values() for s in slots)

    def reassign(self, removed: Collection[str]) -> None:
        """The first occurrence of each article in a result still sent holds it; later ones refer to it."""
        seen: set[str] = set()
        for call, slots in self.slots.items():
            if call in removed:
                continue
            for slot in slots:
                slot.ref = slot.key in seen
                seen.add(slot.key)

    def drop_below(self, floor: float) -> int:
        """Drop the articles whose ``rerank_score`` is under ``floor`` times the best one's: they would cost
        the model reading time and lead it astray without holding the answer. Off when ``floor`` is 0, and
        when a score is negative (a cross-encoder's logits: a ratio means nothing there); an article without
        a score is kept, and so is one an LLM reranker chose (flash: its score is its position). Returns how
        many were dropped."""
        scores = {k: _floor_score(e.article.metadata) for k, e in self.entries.items()}
        finite = [v for v in scores.values() if math.isfinite(v)]
        if floor <= 0 or not finite or min(finite) < 0 or max(finite) <= 0:
            return 0
        bar = floor * max(finite)
        low = [self.entries[k] for k, v in scores.items() if math.isfinite(v) and v < bar]
        for e in low:
            e.set("", 0, "dropped")
            e.allocated, e.fallback_reason = 0, BELOW_FLOOR
        return len(low)

    def cut_worst(self, excess: int) -> bool:
        """Free ``excess`` tokens from the worst-ranked article shown: cut it, or drop it when little would be
        left. ``False`` when no article is left to cut."""
        alive = [e for e in self.entries.values() if e.status != "dropped" and e.content]
        if not alive:
            return False
        worst = max(alive, key=lambda e: e.rank)
        keep = worst.tokens - excess - _TRIM_SLACK
        if keep < _MIN_USEFUL_TOKENS:
            worst.set("", 0, "dropped")
        else:
            text = self.tokens.truncate(worst.content, keep)
            worst.set(text, self.tokens.count(text), "compressed" if worst.status == "compressed" else "truncated")
            worst.fallback_reason = worst.fallback_reason or "over_window"
        return True

    # --- as sent --------------------------------------------------------------------------------------
    def _shown(self, e: Entry) -> Article:
        if e.status in ("compressed", "truncated"):
            meta = {**e.article.metadata, "compressed": True, "original_tokens": e.raw_tokens, "tokens": e.tokens}
            # whether every sentence shown is the article's own (cut, extracted), which a citation may quote
            meta[COMPRESSED_VERBATIM] = e.status == "truncated" or self.verbatim_compression
            return replace(e.article, content=e.content, metadata=meta)
        return replace(e.article, content=e.content)

    def results(self, removed: Collection[str] = ()) -> dict[str, SearchResult]:
        """The results still sent, deduplicated and budgeted; each result's metadata says what it saved."""
        out: dict[str, SearchResult] = {}
        for call, original in self.originals.items():
            if call in removed:
                continue
            articles: list[Article] = []
            saved = compressed = dropped = references = 0
            for slot in self.slots.get(call, []):
                e = self.entries[slot.key]
                if e.status == "dropped" or slot.ref:
                    saved += slot.original_tokens
                    dropped += e.status == "dropped" and not slot.ref
                    if e.status != "dropped":
                        references += 1
                        a = e.article
                        articles.append(Article(a.kb_id, a.title, a.url, "", metadata={SEE_ABOVE: True}))
                    continue
                compressed += e.status in ("compressed", "truncated")
                saved += max(0, slot.original_tokens - e.tokens)
                articles.append(self._shown(e))
            meta = {**original.metadata, "tokens_saved": saved, "compressed_articles_count": compressed}
            if dropped:
                meta["articles_dropped"] = dropped
            if references:
                meta["references_count"] = references
            out[call] = SearchResult(tuple(articles), meta, original.error)
        return out

    def shown(self, removed: Collection[str] = ()) -> list[Article]:
        """The articles shown in full in the results still sent, best first (the answer's sources)."""
        held = {s.key for call, slots in self.slots.items() if call not in removed for s in slots if not s.ref}
        return [self._shown(e) for e in self.entries.values() if e.key in held and e.status != "dropped"]

    def outcomes(self) -> list[ArticleOutcome]:
        """One outcome per entry (best first), then one per reference."""
        out = [
            _outcome(e, e.raw_tokens, e.tokens, e.status, e.allocated, e.fallback_reason) for e in self.entries.values()
        ]
        for slots in self.slots.values():
            out += [_outcome(self.entries[s.key], s.original_tokens, 0, "reference") for s in slots if s.ref]
        return out


class BudgetRun:
    """The state of one budget run and its steps (see the module docstring): built on the prompt as it came,
    rendered and counted, with the report's limits and fixed part filled in."""

    messages: list[ChatMessage]
    q_idx: int
    results: Mapping[str, SearchResult]
    table: ArticleTable
    sent: list[ChatMessage]
    total: int

    def __init__(
        self,
        messages: Sequence[ChatMessage],
        results: Mapping[str, SearchResult],
        render: Renderer,
        tools: Sequence[Any] | None,
        accountant: PromptAccountant,
        limits: WindowLimits,
        *,
        fallback_context_window: int | None = None,
        compressor: str = "",
        verbatim_compression: bool = True,
    ) -> None:
        self.render, self.tools, self.acc, self.tokens = render, tools, accountant, accountant.tokens
        self.verbatim_compression = verbatim_compression
        self.limits, self.fallback_context_window = limits, fallback_context_window
        self.started = time.perf_counter()
        self.removed: set[int] = set()
        self.rewritten = self.memory_changed = False
        self.use(messages, results)
        tokens_before = self.send()
        self.report = BudgetReport.of(
            limits, fixed_tokens=self.fixed_tokens(), compressor=compressor, tokens_before=tokens_before
        )

    def use(self, messages: Sequence[ChatMessage], results: Mapping[str, SearchResult]) -> None:
        """Budget ``messages``; their search results with articles (by call id) make the article table."""
        self.messages, self.q_idx, self.results = list(messages), current_turn_start(messages), results
        live = [k for m in self.messages if (k := call_id(m)) and k in results and results[k].articles]
        self.table = ArticleTable(
            {k: results[k] for k in live}, self.tokens, verbatim_compression=self.verbatim_compression
        )

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
        """Render what is left (the table's results once rewritten, else the results as they came), count it."""
        gone = self.removed_calls()
        self.table.reassign(gone)
        results = self.table.results(gone) if self.rewritten else self.table.originals
        self.sent = self.render(self.conversation(), results, self.table.shown(gone))
        self.total = self.acc.count_prompt(self.sent, tools=self.tools)
        return self.total

    def path(self, step: str) -> None:
        if step not in self.report.path:
            self.report.path.append(step)

    # --- steps ----------------------------------------------------------------------------------------
    def apply_floor(self, floor: float) -> None:
        """Leave out the articles under the relevance floor (``ArticleTable.drop_below``), even when all of
        them would fit: a shorter prompt is read sooner."""
        if self.table.drop_below(floor):
            self.rewritten = True
            self.path("below_floor")
            self.send()

    def plan(self) -> list[tuple[Entry, int]]:
        """Allocate the room left by a skeleton prompt (the articles' content empty, as rendered) by rank.
        Returns the compression jobs ``(entry, target_tokens)``."""
        if not self.table.entries:
            return []  # nothing to rewrite: the tool messages are sent as they came
        self.rewritten = True
        if self.table.repeats:
            self.path("deduplicated")
        entries = list(self.table.entries.values())  # best first
        self.report.article_tokens_before = sum(e.raw_tokens for e in entries)
        min_tokens = self.limits.min_article_tokens
        while True:
            alive = [e for e in entries if e.status != "dropped"]
            # Skeleton: the prompt with every surviving article's content empty, its metadata as if compressed.
            for e in alive:
                e.set("", 0, "compressed")
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
            for e in unfunded[len(unfunded) // 2 :]:
                e.set("", 0, "dropped")
                e.allocated = 0
        jobs: list[tuple[Entry, int]] = []
        for e, a in zip(alive, alloc, strict=True):
            e.allocated = a
            if a <= 0:
                e.set("", 0, "dropped")
            elif a < e.raw_tokens:
                jobs.append((e, a))
        best, lost = alive[0], sum(_dropped_for_room(e) for e in entries)
        if alloc[0] < min(best.raw_tokens, min_eff) or lost:
            self.recommend_fallback(
                f"best article {best.key!r} gets {alloc[0]} of its {best.raw_tokens} tokens "
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
        self.send()
        self.enforce()
        for status in ("compressed", "truncated", "dropped"):
            if any(e.status == status and not _below_floor(e) for e in self.table.entries.values()):
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
        if self.total > hard and any(_dropped_for_room(e) for e in self.table.entries.values()):
            self.recommend_fallback("all articles had to be dropped to fit the window")
        history, turn = group_spans(self.messages, 0, self.q_idx), group_spans(self.messages, self.q_idx + 1)
        for spans, step in ((history, "history_dropped"), (turn, "tool_calls_dropped")):
            for span in spans:
                if self.total <= hard:
                    return
                if any(self.messages[i].role != MessageRole.SYSTEM for i in span):
                    self.removed.update(span)
                    self.path(step)
                    self.send()

    def close(self, max_articles: int | None) -> BudgetReport:
        """The report, completed: what was sent, per article, and how many articles the next search may add."""
        report = self.report
        kept = [e.tokens for e in self.table.entries.values() if e.tokens] if self.rewritten else []
        report.tokens_after = self.total
        report.articles = self.table.outcomes() if self.rewritten else []
        report.article_tokens_after = sum(kept)
        per_article = sum(kept) // len(kept) if kept else _DEFAULT_ARTICLE_TOKENS
        report.available_tokens = max(0, self.limits.target - self.total)
        report.article_cap = suggest_article_cap(
            report.available_tokens,
            per_article_tokens=max(self.limits.min_article_tokens, per_article),
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


def _floor_score(metadata: Mapping[str, Any]) -> float:
    """The score the relevance floor compares: ``rerank_score``; NaN (kept) without one or when an LLM chose it."""
    return math.nan if _LLM_SELECTED in metadata else _number(metadata.get(RERANK_SCORE), math.nan)


def _below_floor(e: Entry) -> bool:
    return e.status == "dropped" and e.fallback_reason == BELOW_FLOOR


def _dropped_for_room(e: Entry) -> bool:
    return e.status == "dropped" and e.fallback_reason != BELOW_FLOOR


def _number(value: Any, default: float) -> float:
    """``value`` as a float; ``default`` when it is missing, not a number or NaN."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return default if math.isnan(number) else number


def _outcome(
    e: Entry, before: int, after: int, status: ArticleStatus, allocated: int | None = None, reason: str | None = None
) -> ArticleOutcome:
    rank = float(e.article.metadata[NORMALIZED_RANK])
    return ArticleOutcome(
        kb_id=e.key, title=e.article.title, normalized_rank=rank, article_rank=e.rank, tokens_before=before,
        allocated=allocated, tokens_after=after, status=status, fallback_reason=reason,
    )  # fmt: skip
