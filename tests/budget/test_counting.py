from __future__ import annotations

from ragidx.budget.counting import CachedTokenCounter
from ragidx.providers.tokenizer import TokenCounter

LONG = "Insert a table of contents from the Insert menu. " * 20


def test_counts_equal_the_plain_counter_and_repeats_hit_the_cache() -> None:
    plain, cached = TokenCounter(), CachedTokenCounter()
    for text in ("", "short", LONG, LONG + "x"):
        assert cached.count(text) == plain.count(text)
    assert cached.count(LONG) == plain.count(LONG)
    info = cached.cache_info()
    assert info["hits"] == 1 and info["misses"] == 2 and info["entries"] == 2  # short texts not cached


def test_cache_is_bounded_and_wrap_reuses_a_cached_counter() -> None:
    cached = CachedTokenCounter(max_entries=2)
    for i in range(5):
        cached.count(f"{i} " + LONG)
    assert cached.cache_info()["entries"] == 2
    assert CachedTokenCounter.wrap(cached) is cached
    assert CachedTokenCounter.wrap(TokenCounter("o200k_base")).encoding_name == "o200k_base"
