"""A least-recently-used map keyed by texts, bounded in entries and in the characters of its keys.

The budget remembers per-text results (token counts, an article's JSON string) across the LLM calls of
a turn; the texts are whole articles, so the memory they keep alive is bounded as well as their number.
Not thread-safe by itself: its owners hold their own lock around it.

Example:
    >>> lru = TextLRU[int](max_entries=2, max_chars=100)
    >>> lru.put("a" * 40, 1); lru.put("b" * 40, 2); lru.put("c" * 40, 3)
    >>> (len(lru), lru.get("a" * 40), lru.get("c" * 40))
    (2, None, 3)
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

__all__ = ["TextLRU"]

V = TypeVar("V")


class TextLRU(Generic[V]):
    """At most ``max_entries`` values and ``max_chars`` characters of keys; a key longer than
    ``max_chars`` is not kept (it would push out everything else, then itself)."""

    def __init__(self, max_entries: int, max_chars: int) -> None:
        self.max_entries = max_entries
        self.max_chars = max_chars
        self._items: OrderedDict[str, V] = OrderedDict()
        self.chars = 0

    def get(self, key: str) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: str, value: V) -> None:
        if key in self._items or len(key) > self.max_chars:
            return
        self._items[key] = value
        self.chars += len(key)
        while len(self._items) > self.max_entries or self.chars > self.max_chars:
            old, _ = self._items.popitem(last=False)
            self.chars -= len(old)

    def clear(self) -> None:
        self._items.clear()
        self.chars = 0

    def __len__(self) -> int:
        return len(self._items)
