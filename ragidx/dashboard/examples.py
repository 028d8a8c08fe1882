"""Example questions for an empty chat, drawn from the knowledge base itself: a few article titles.

A title is what the knowledge base certainly covers, in its own words; a question made up from it ("How do I
<title>?") often reads wrong ("How do I Page Numbers?"), so the chat offers the titles as they are and asks
"What does “<title>” cover?" when one is clicked. The picks are deterministic (spread evenly over the indexed
articles in id order, so a knowledge base ingested from several files shows more than its first file), public only
(the dashboard asks as the public), and without titles that are only ids or file names.

Example:
    >>> example_question("Page Numbers")
    'What does “Page Numbers” cover?'
"""

from __future__ import annotations

from typing import Any

from ragidx.safe_text import printable
from ragidx.stores.access import Principal

__all__ = ["example_question", "example_titles"]

MAX_TITLE_CHARS = 80


def example_question(title: str) -> str:
    """The question asked when an example title is clicked."""
    return f"What does “{title}” cover?"


def example_titles(article_store: Any, n: int = 4, *, candidates: int = 24) -> list[str]:
    """Up to ``n`` titles of public, indexed articles, spread over the knowledge base; none when it is empty.

    Args:
        article_store: the engine's :class:`~ragidx.stores.article_store.ArticleStore`.
        n: titles wanted.
        candidates: ids read to find them (some may be restricted, untitled or repeat a title).
    """
    ids = article_store.indexed_ids(min_chunks=1)
    if not ids or n < 1:
        return []
    step = max(1, len(ids) // candidates)
    picked = ids[::step][:candidates]
    found = article_store.get(picked, principal=Principal())
    titles: list[str] = []
    for kb_id in picked:
        article = found.get(kb_id)
        title = " ".join((article.title if article else "").split())
        if not title or title == kb_id or len(title) > MAX_TITLE_CHARS or title in titles:
            continue
        titles.append(printable(title))
    if len(titles) <= n:
        return titles
    return [titles[round(i * (len(titles) - 1) / (n - 1))] for i in range(n)] if n > 1 else titles[:1]
