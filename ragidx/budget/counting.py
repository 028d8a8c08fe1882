"""A token counter that remembers the counts of texts it has seen (bounded, thread-safe).

The hook runs before every LLM call of a turn, and each call re-sends the same system prompt,
history and tool results: counting them once instead of on every call is most of the hook's cost.
Counts are exact (a cache hit returns what ``TokenCounter.count`` returned for the same string).

``count_edited`` counts a text from one it was made from (exact for word-additive counters, see
``TokenCounter``); its results are cached like any other count.

Example:
    >>> tok = CachedTokenCounter()
    >>> tok.count("hello world " * 20) == tok.count("hello world " * 20)
    True
    >>> tok.cache_info()["hits"]
    1
"""

from __future__ import annotations

import threading
from typing import Any

from ragidx.budget.lru import TextLRU
from ragidx.providers.tokenizer import TokenCounter

__all__ = ["CachedTokenCounter"]


class CachedTokenCounter(TokenCounter):
    """``TokenCounter`` with an LRU cache of ``count`` results for texts of ``min_chars`` or more.

    Args:
        inner: The counter to wrap (its encoding is shared); default tiktoken ``cl100k_base``.
        max_entries: Most texts remembered.
        max_chars: Most characters of remembered texts in total (the cache keeps the strings alive).
        min_chars: Shorter texts are counted directly (cheaper than caching them).

    Example:
        >>> CachedTokenCounter.wrap(TokenCounter("o200k_base")).encoding_name
        'o200k_base'
    """

    def __init__(
        self,
        inner: TokenCounter | None = None,
        *,
        max_entries: int = 4096,
        max_chars: int = 16_000_000,
        min_chars: int = 64,
    ) -> None:
        inner = inner or TokenCounter()
        super().__init__(inner.encoding_name)
        self._inner = inner
        self.min_chars = min_chars
        self._cache = TextLRU[int](max_entries, max_chars)
        self._hits = 0
        self._misses = 0
        self._lock = threading.Lock()

    @classmethod
    def wrap(cls, counter: TokenCounter | None) -> CachedTokenCounter:
        """``counter`` itself when it already caches, else a caching wrapper around it."""
        if isinstance(counter, CachedTokenCounter):
            return counter
        return cls(counter)

    @property
    def word_additive(self) -> bool:
        return self._inner.word_additive

    def encode(self, text: str) -> list[int]:
        return self._inner.encode(text)  # the inner counter may not be tiktoken (a model's own vocabulary)

    def decode(self, tokens: list[int]) -> str:
        return self._inner.decode(tokens)

    def count(self, text: str) -> int:
        if not text:
            return 0
        if len(text) < self.min_chars:
            return self._inner.count(text)
        cached = self.cached(text)
        if cached is not None:
            return cached
        n = self._inner.count(text)
        self.remember(text, n)
        return n

    def cached(self, text: str) -> int | None:
        """The remembered count of ``text`` (a hit), or ``None`` (counts nothing)."""
        with self._lock:
            cached = self._cache.get(text)
            if cached is not None:
                self._hits += 1
            return cached

    def remember(self, text: str, count: int) -> None:
        with self._lock:
            self._misses += 1
            self._cache.put(text, count)

    def count_edited(self, old: str, old_count: int, new: str) -> int:
        if len(new) < self.min_chars or not self._inner.word_additive:
            return self.count(new)
        cached = self.cached(new)
        if cached is not None:
            return cached
        n = super().count_edited(old, old_count, new)
        self.remember(new, n)
        return n

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()

    def cache_info(self) -> dict[str, Any]:
        with self._lock:
            return {"hits": self._hits, "misses": self._misses, "entries": len(self._cache), "chars": self._cache.chars}
