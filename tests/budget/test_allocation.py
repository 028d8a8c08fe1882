from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragidx.budget.allocation import (
    WindowLimits,
    _fill_scale,
    adaptive_min_tokens,
    allocate_article_budgets,
    rank_share,
    suggest_article_cap,
)


def test_everything_fits_is_unchanged() -> None:
    assert allocate_article_budgets([0.0, 1.0], [100, 200], 300) == [100, 200]


def test_shares_are_linear_from_80_to_30_percent() -> None:
    assert rank_share(0.0) == 0.8 and rank_share(1.0) == pytest.approx(0.3) and rank_share(0.5) == pytest.approx(0.55)
    # budget == sum of wishes: each gets exactly its share
    alloc = allocate_article_budgets([0.0, 0.5, 1.0], [1000, 1000, 1000], 1650, min_tokens=100)
    assert alloc == [800, 550, 300]


def test_best_keeps_most_and_budget_is_filled() -> None:
    alloc = allocate_article_budgets([0.0, 0.25, 0.5, 0.75, 1.0], [1000] * 5, 2000, min_tokens=300)
    assert sum(alloc) == 2000
    assert alloc == sorted(alloc, reverse=True) and alloc[0] > alloc[-1]


def test_small_budget_lowers_minimum_then_drops_worst_first() -> None:
    assert adaptive_min_tokens(1500, 5, 300) == 150
    assert adaptive_min_tokens(300, 5, 300) == 100
    alloc = allocate_article_budgets([0.0, 0.5, 1.0], [1000] * 3, 450, min_tokens=300)
    assert alloc[2] == 0 and alloc[0] >= alloc[1] >= 100 and sum(alloc) == 450
    assert allocate_article_budgets([0.0, 0.5, 1.0], [1000] * 3, 250, min_tokens=300) == [250, 0, 0]
    assert allocate_article_budgets([1.0, 0.0], [1000, 1000], 60, min_tokens=300) == [0, 60]


def test_a_tight_budget_shows_fewer_articles_each_worth_reading() -> None:
    ranks = [0.0, 0.25, 0.5, 0.75, 1.0]
    alloc = allocate_article_budgets(ranks, [5000] * 5, 770, min_tokens=100)  # a 1,024-token prompt cap
    assert alloc[3:] == [0, 0] and sum(alloc) == 770 and all(a >= 100 for a in alloc[:3])
    # tighter (a 768-token cap): a third each would be under 200 tokens, so two articles, not three fragments
    alloc = allocate_article_budgets(ranks, [5000] * 5, 540, min_tokens=100)
    assert alloc[2:] == [0, 0, 0] and sum(alloc) == 540 and all(a >= 200 for a in alloc[:2])
    # and one readable piece rather than two scraps when even two would not get 200 each
    assert allocate_article_budgets(ranks, [5000] * 5, 350, min_tokens=100) == [350, 0, 0, 0, 0]
    # short articles that fit whole stay; each shown article can count on 300 tokens when the budget is larger
    assert 0 not in allocate_article_budgets(ranks, [5000, 120, 120, 120, 120], 770, min_tokens=100)
    assert 0 not in allocate_article_budgets(ranks, [1000] * 5, 1600, min_tokens=100)


def test_leftover_shrinks_next_article_instead_of_wasting() -> None:
    alloc = allocate_article_budgets([0.0, 0.5, 1.0], [100, 100, 1000], 250, min_tokens=300)
    assert alloc[:2] == [100, 100] and alloc[2] == 50


def test_zero_budget_and_no_articles() -> None:
    assert allocate_article_budgets([0.0, 1.0], [10, 10], 0) == [0, 0]
    assert allocate_article_budgets([], [], 100) == []
    with pytest.raises(ValueError, match="differ in length"):
        allocate_article_budgets([0.0], [1, 2], 10)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.floats(-0.5, 1.5), st.integers(0, 5000)), max_size=12),
    st.integers(0, 20_000),
    st.integers(16, 600),
)
def test_allocation_invariants(items: list[tuple[float, int]], budget: int, min_tokens: int) -> None:
    ranks, sizes = [r for r, _ in items], [s for _, s in items]
    alloc = allocate_article_budgets(ranks, sizes, budget, min_tokens=min_tokens)
    assert sum(alloc) <= max(budget, 0)
    assert all(0 <= a <= s for a, s in zip(alloc, sizes, strict=True))
    if sum(sizes) <= budget:
        assert alloc == sizes
    # a kept article is never worse-ranked than a dropped one of nonzero size (worst dropped first)
    clamp = [min(1.0, max(0.0, r)) for r in ranks]
    kept = [r for r, a in zip(clamp, alloc, strict=True) if a > 0]
    dropped = [r for r, a, s in zip(clamp, alloc, sizes, strict=True) if a == 0 and s > 0]
    if kept and dropped:
        assert max(kept) <= min(dropped)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 600), st.floats(0.3, 0.8)), min_size=1, max_size=12),
    st.integers(0, 40_000),
)
def test_fill_scale_is_the_largest_scale_within_the_budget(items: list[tuple[int, int, float]], budget: int) -> None:
    sizes = [s for s, _, _ in items]
    floors = [min(f, s) for s, f, _ in items]
    wishes = [s * share for s, _, share in items]  # as the allocation wishes: a rank's share of the size
    if sum(floors) > budget:
        return  # the caller never asks: it drops articles until their floors fit

    def total(scale: float) -> float:
        return sum(min(s, max(f, scale * w)) for s, f, w in zip(sizes, floors, wishes, strict=True))

    scale = _fill_scale(sizes, floors, wishes, budget)
    assert total(scale) <= budget + 1e-6 * max(1, budget)
    if sum(sizes) > budget:  # a little more would pass the budget
        assert total(scale * (1 + 1e-6) + 1e-9) > budget - 1e-6 * max(1, budget)
    else:  # everything fits: every article gets its size
        assert total(scale) == pytest.approx(sum(sizes))


def test_window_limits_reserve_margin_and_output() -> None:
    lim = WindowLimits.compute(20_000, max_output_tokens=1000, margin_pct=0.05, trigger_pct=0.85, target_pct=0.80)
    assert (lim.margin, lim.hard_limit, lim.trigger, lim.target) == (1000, 18000, 17000, 16000)
    tight = WindowLimits.compute(4096, max_output_tokens=2048, margin_pct=0.05, trigger_pct=0.75, target_pct=0.70)
    assert tight.target <= tight.trigger <= tight.hard_limit == 4096 - 205 - 2048
    with pytest.raises(ValueError, match=re.escape("need 0 < target_pct <= trigger_pct <= 1")):
        WindowLimits.compute(4096, max_output_tokens=1, margin_pct=0.05, trigger_pct=0.5, target_pct=0.7)


def test_small_windows_act_earlier() -> None:
    small, big = WindowLimits.compute(8192, max_output_tokens=0), WindowLimits.compute(128_000, max_output_tokens=0)
    assert (small.trigger_pct, small.target_pct, small.min_article_tokens) == (0.75, 0.70, 100)
    assert (big.trigger_pct, big.target_pct, big.min_article_tokens) == (0.85, 0.80, 300)
    assert WindowLimits.compute(15_000, max_output_tokens=0).min_article_tokens == 150


def test_a_prompt_cap_is_filled_up_to_the_cap() -> None:
    lim = WindowLimits.compute(8192, max_output_tokens=512)
    capped = lim.capped(1024)
    assert (capped.trigger, capped.target, capped.hard_limit) == (1024, 1024, 1024)
    assert capped.context_window == 8192 and capped.margin == lim.margin
    assert lim.capped(None) is lim and lim.capped(10**6) is lim  # no cap, or one above the window's limit


def test_suggest_article_cap() -> None:
    assert suggest_article_cap(2500, per_article_tokens=1000, max_articles=5) == 2
    assert suggest_article_cap(0, per_article_tokens=1000) == 1
    assert suggest_article_cap(10**6, per_article_tokens=1000, max_articles=5) == 5
