"""The retrieval cap: the retrieve tool reads it; the context budget sets it after each run.

The tool never counts tokens; it only asks ``cap.limit(top_k)`` how many articles to return. The
budget knows what is left under its target and sets the cap accordingly (see
``ContextBudget(cap=...)``). Thread-safe, so one agent's hook and tool can share it across threads.

Example:
    >>> cap = RetrievalCap()
    >>> cap.limit(5)
    5
    >>> cap.set(2)
    >>> cap.limit(5)
    2
"""

from __future__ import annotations

import threading

__all__ = ["RetrievalCap"]


class RetrievalCap:
    """Most articles the next retrieve call should return; ``None`` means no limit.

    Example:
        >>> RetrievalCap(3).get()
        3
    """

    def __init__(self, value: int | None = None) -> None:
        self._lock = threading.Lock()
        self._value = value

    def set(self, value: int | None) -> None:
        if value is not None and value < 1:
            raise ValueError(f"a retrieval cap must be >= 1 or None, got {value}")
        with self._lock:
            self._value = value

    def get(self) -> int | None:
        with self._lock:
            return self._value

    def limit(self, top_k: int) -> int:
        """``top_k`` lowered to the cap (never below 1)."""
        value = self.get()
        return max(1, top_k if value is None else min(top_k, value))
