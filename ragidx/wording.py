"""Counts in the sentences ragidx writes for people ("1 article", "3 articles").

Example:
    >>> counted(1, "article"), counted(3, "article"), counted(2, "entry", "entries")
    ('1 article', '3 articles', '2 entries')
"""

from __future__ import annotations

__all__ = ["counted"]


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 (``plural``, else ``noun`` + "s")."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
