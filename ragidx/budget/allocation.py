"""The room of one call and its share per article: window limits, rank-proportional allocation, the cap.

An article's wish is a share of its own tokens, linear in its normalized rank: 80% at rank 0.0 down to
30% at rank 1.0. Wishes are scaled by one common factor so the allocations fill the budget, each
clamped between a per-article minimum and the article's own size. The minimum adapts to small budgets
(``max(100, budget // (2 * n))``, never above the configured one). An article shown beside compressed
ones must be worth reading: the worst-ranked articles are dropped (allocation 0) while the survivors could
not each get a third of the budget or 300 tokens, whichever is less, but at least 200 (or their whole
text), and a lone survivor gets what is left.

Example:
    >>> allocate_article_budgets([0.0, 1.0], [1000, 1000], 1000, min_tokens=100)
    [728, 272]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

__all__ = [
    "ABSOLUTE_MIN_ARTICLE_TOKENS",
    "SMALL_WINDOW_TOKENS",
    "WindowLimits",
    "adaptive_min_tokens",
    "allocate_article_budgets",
    "rank_share",
    "suggest_article_cap",
]

SMALL_WINDOW_TOKENS = 16_384
"""Windows below this get earlier thresholds and a smaller per-article minimum."""
ABSOLUTE_MIN_ARTICLE_TOKENS = 100
"""The adaptive minimum never goes below this (less is not readable)."""
MIN_PARTIAL_TOKENS = 32
"""A dropped article still gets the leftover budget when at least this much (or its whole size) is left."""
MIN_SHOWN_SHARE = 1 / 3
MIN_SHOWN_TOKENS = 300
READABLE_TOKENS = 200
"""An article shown beside compressed ones can count on ``min(MIN_SHOWN_SHARE * budget, MIN_SHOWN_TOKENS)``
tokens, never less than ``READABLE_TOKENS`` (or its whole text). Measured with ``benchmarks/prompt_recall.py``
(how often the gold answer reaches the prompt): at a 1,024-token prompt cap three articles at a third each held
the answer more often than five fragments (PostgreSQL 0.73 → 0.82, LibreOffice en 0.73 → 0.85, ru 0.70 → 0.83;
HotpotQA's short paragraphs, shown whole, 0.80 either way); at a 768-token cap, where a third is under 200
tokens, two articles held it more often than three (PostgreSQL, the set looked at, 0.70 → 0.79; LibreOffice en
0.73 → 0.81, ru 0.78 → 0.91, HotpotQA 0.76 → 0.76). Article budgets of 600 tokens or more (caps from ~850)
are unchanged by the floor."""
BEST_SHARE = 0.8
WORST_SHARE = 0.3


@dataclass(frozen=True)
class WindowLimits:
    """The token limits of one call.

    ``hard_limit`` is the most prompt tokens allowed: the window minus the safety margin and the reserved
    output. ``trigger`` and ``target`` never exceed it. A window under ``SMALL_WINDOW_TOKENS`` acts earlier
    (75% / 70%) with a per-article minimum of 1% of the window (at least 100, at most the configured one).

    Example:
        >>> lim = WindowLimits.compute(8192, max_output_tokens=512)
        >>> (lim.trigger_pct, lim.target_pct, lim.min_article_tokens)
        (0.75, 0.7, 100)
        >>> (lim.margin, lim.hard_limit, lim.trigger, lim.target)
        (410, 7270, 6144, 5734)
    """

    context_window: int
    max_output_tokens: int
    margin_pct: float
    margin: int
    hard_limit: int
    trigger_pct: float
    target_pct: float
    trigger: int
    target: int
    min_article_tokens: int

    @classmethod
    def compute(
        cls,
        context_window: int,
        *,
        max_output_tokens: int,
        margin_pct: float = 0.05,
        trigger_pct: float = 0.85,
        target_pct: float = 0.80,
        min_article_tokens: int = 300,
    ) -> WindowLimits:
        if context_window <= 0:
            raise ValueError(f"context_window must be positive, got {context_window}")
        if max_output_tokens < 0:
            raise ValueError(f"max_output_tokens must be >= 0, got {max_output_tokens}")
        if not 0 <= margin_pct < 0.5:
            raise ValueError(f"safety margin must be in [0, 0.5), got {margin_pct}")
        if not 0 < target_pct <= trigger_pct <= 1:
            raise ValueError(f"need 0 < target_pct <= trigger_pct <= 1, got target {target_pct}, trigger {trigger_pct}")
        if context_window < SMALL_WINDOW_TOKENS:
            trigger_pct, target_pct = min(trigger_pct, 0.75), min(target_pct, 0.70)
            small_min = max(ABSOLUTE_MIN_ARTICLE_TOKENS, int(context_window * 0.01))
            min_article_tokens = min(min_article_tokens, small_min)
        margin = math.ceil(context_window * margin_pct)
        hard = context_window - margin - max_output_tokens
        trigger = min(int(context_window * trigger_pct), hard)
        # When the hard limit binds, keep the target the same fraction below the trigger.
        target = min(int(context_window * target_pct), int(hard * target_pct / trigger_pct))
        return cls(
            context_window=context_window,
            max_output_tokens=max_output_tokens,
            margin_pct=margin_pct,
            margin=margin,
            hard_limit=hard,
            trigger_pct=trigger_pct,
            target_pct=target_pct,
            trigger=trigger,
            target=max(0, target),
            min_article_tokens=min_article_tokens,
        )

    def capped(self, prompt_cap: int | None) -> WindowLimits:
        """These limits under a cap on prompt tokens below the window (a time or cost goal): the prompt may
        fill the cap, so the cap is trigger, target and hard limit at once.

        Example:
            >>> lim = WindowLimits.compute(8192, max_output_tokens=512).capped(1024)
            >>> (lim.trigger, lim.target, lim.hard_limit, lim.context_window)
            (1024, 1024, 1024, 8192)
        """
        if prompt_cap is None or prompt_cap >= self.hard_limit:
            return self
        return replace(self, hard_limit=prompt_cap, trigger=prompt_cap, target=prompt_cap)


def rank_share(normalized_rank: float) -> float:
    """Share of its own tokens an article wishes to keep: 0.8 at rank 0.0 .. 0.3 at rank 1.0."""
    r = min(1.0, max(0.0, normalized_rank))
    return BEST_SHARE - (BEST_SHARE - WORST_SHARE) * r


def adaptive_min_tokens(budget: int, n_articles: int, min_tokens: int) -> int:
    """``min(min_tokens, max(100, budget // (2 * n)))``: small budgets lower the per-article floor."""
    if n_articles <= 0:
        return min_tokens
    return min(min_tokens, max(ABSOLUTE_MIN_ARTICLE_TOKENS, budget // (2 * n_articles)))


def allocate_article_budgets(
    ranks: Sequence[float],
    sizes: Sequence[int],
    budget: int,
    *,
    min_tokens: int = 300,
) -> list[int]:
    """Per-article token budgets summing to at most ``budget``; 0 means drop the article.

    Args:
        ranks: Normalized rank per article (0.0 best .. 1.0 worst); clamped into range.
        sizes: Current tokens per article.
        budget: Tokens all articles together may use.
        min_tokens: Configured per-article minimum; adapted down for small budgets.

    Returns:
        Allocations in input order, each ``<= sizes[i]``. When everything fits, every article keeps all
        its tokens; among articles of equal size a better rank never gets fewer tokens.
    """
    if len(ranks) != len(sizes):
        raise ValueError(f"ranks and sizes differ in length: {len(ranks)} vs {len(sizes)}")
    n = len(sizes)
    sizes = [max(0, int(s)) for s in sizes]
    budget = max(0, int(budget))
    if sum(sizes) <= budget:  # also no articles
        return list(sizes)
    floor_all = adaptive_min_tokens(budget, n, min_tokens)
    floors = [min(floor_all, s) for s in sizes]
    shown = max(floor_all, min(int(budget * MIN_SHOWN_SHARE), MIN_SHOWN_TOKENS), min(READABLE_TOKENS, budget))
    # Best first; drop the worst while the survivors can't each be paid their share of the budget.
    order = sorted(range(n), key=lambda i: (min(1.0, max(0.0, ranks[i])), i))
    kept = list(order)
    while len(kept) > 1 and sum(min(shown, sizes[i]) for i in kept) > budget:
        kept.pop()
    alloc = [0] * n
    if len(kept) == 1 and floors[kept[0]] > budget:
        alloc[kept[0]] = min(sizes[kept[0]], budget)
        return alloc
    wishes = {i: sizes[i] * rank_share(ranks[i]) for i in kept}
    lo = _fill_scale([sizes[i] for i in kept], [floors[i] for i in kept], [wishes[i] for i in kept], budget)
    for i in kept:
        alloc[i] = int(min(sizes[i], max(floors[i], lo * wishes[i])))
    # Hand rounding leftovers to the best-ranked articles with room, then shrink (rather than drop) the
    # best dropped article into what is left when that is still a readable piece.
    left = budget - sum(alloc)
    for i in kept:
        if left <= 0:
            break
        extra = min(left, sizes[i] - alloc[i])
        alloc[i] += extra
        left -= extra
    for i in order[len(kept) :]:
        piece = min(left, sizes[i])
        if piece < min(floors[i], MIN_PARTIAL_TOKENS):
            break
        alloc[i] = piece
        left -= piece
    return alloc


def _fill_scale(sizes: Sequence[int], floors: Sequence[int], wishes: Sequence[float], budget: int) -> float:
    """The largest ``s`` with ``sum(min(size, max(floor, s * wish))) <= budget`` (``sum(floors) <= budget``).

    The sum is piecewise linear in ``s``: each article adds its floor up to ``floor / wish``, then
    ``s * wish`` up to ``size / wish``, then its size. The breakpoints are walked in order until the sum
    would pass the budget, and the segment there solved exactly (where everything fits: the last point).
    """
    events: list[tuple[float, float, float]] = []  # (where, slope change, constant change)
    const, slope = float(sum(floors)), 0.0
    for size, floor, wish in zip(sizes, floors, wishes, strict=True):
        if wish > 0:
            events.append((floor / wish, wish, -floor))
            events.append((size / wish, -wish, size))
    events.sort()
    for where, d_slope, d_const in events:
        if const + slope * where > budget:
            return (budget - const) / slope  # slope > 0: the sum rose past the budget on this segment
        slope += d_slope
        const += d_const
    return events[-1][0] if events else 0.0


def suggest_article_cap(
    available_tokens: int,
    *,
    per_article_tokens: int,
    max_articles: int | None = None,
) -> int:
    """How many more articles a retrieve call should return so they fit in ``available_tokens``.

    Always at least 1 (one article can still be compressed to fit); at most ``max_articles``.

    Example:
        >>> suggest_article_cap(2500, per_article_tokens=1000, max_articles=5)
        2
    """
    per = max(1, per_article_tokens)
    cap = max(1, max(0, available_tokens) // per)
    return min(cap, max_articles) if max_articles is not None else cap
