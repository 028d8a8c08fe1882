"""The articles of one budgeted call: deduplicated once, each with what the budget makes of it.

``ArticleTable`` reads the ``SearchResult`` objects of a conversation (by tool-call id, in the order of
their messages) once: each article occurrence is a slot; per key (``kb_id``, or the position for an
article without one) the best-scored copy is the entry that is shown, re-ranked (``dedup``), its first
occurrence in full and later ones as ``see_above`` references. The budget sets each entry's content and
status; ``results()`` gives the results as they will be sent and ``shown()`` the articles shown in full.

Example:
    >>> from ragidx.article import Article, SearchResult
    >>> from ragidx.providers.tokenizer import TokenCounter
    >>> a = Article("a", "A", "", "Text.", metadata={"rerank_score": 0.5})
    >>> table = ArticleTable({"c1": SearchResult((a,)), "c2": SearchResult((a,))}, TokenCounter())
    >>> [[x.metadata.get("see_above", False) for x in r.articles] for r in table.results().values()]
    [[False], [True]]
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

from ragidx.article import ARTICLE_RANK, NORMALIZED_RANK, SEE_ABOVE, Article, SearchResult
from ragidx.budget.dedup import article_key, dedupe_keyed
from ragidx.budget.report import ArticleOutcome, ArticleStatus
from ragidx.providers.tokenizer import TokenCounter

__all__ = ["ArticleTable", "Entry"]

_MIN_USEFUL_TOKENS = 16
_TRIM_SLACK = 4


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
    """The entries and slots of ``results`` (``{tool_call_id: SearchResult}`` in message order)."""

    def __init__(self, results: Mapping[str, SearchResult], tokens: TokenCounter) -> None:
        self.originals = dict(results)
        self.tokens = tokens
        sizes: dict[str, int] = {}

        def size(text: str) -> int:
            if text not in sizes:
                sizes[text] = tokens.count(text)
            return sizes[text]

        self.slots: dict[str, list[_Slot]] = {}
        seen: set[str] = set()
        for c_idx, (call, result) in enumerate(self.originals.items()):
            for a_idx, a in enumerate(result.articles):
                key = article_key(a, f"#{c_idx}:{a_idx}")
                self.slots.setdefault(call, []).append(_Slot(key, key in seen, size(a.content)))
                seen.add(key)
        self.entries = {
            key: Entry(key, art, size(art.content), art.content, size(art.content))
            for key, art in dedupe_keyed([r.articles for r in self.originals.values()])
        }

    @property
    def repeats(self) -> bool:
        return any(s.ref for slots in self.slots.values() for s in slots)

    def ranked(self) -> list[Entry]:
        return sorted(self.entries.values(), key=lambda e: e.rank)

    def reassign(self, removed: Collection[str]) -> None:
        """The first occurrence of each article in a result still sent holds it; later ones refer to it."""
        seen: set[str] = set()
        for call, slots in self.slots.items():
            if call in removed:
                continue
            for slot in slots:
                slot.ref = slot.key in seen
                seen.add(slot.key)

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
        return [self._shown(e) for e in self.ranked() if e.key in held and e.status != "dropped"]

    def outcomes(self) -> list[ArticleOutcome]:
        """One outcome per entry (best first), then one per reference."""
        out = [
            _outcome(
                e, e.raw_tokens, e.tokens if e.status != "dropped" else 0, e.status, e.allocated, e.fallback_reason
            )
            for e in self.ranked()
        ]
        for slots in self.slots.values():
            out += [_outcome(self.entries[s.key], s.original_tokens, 0, "reference") for s in slots if s.ref]
        return out


def _outcome(
    e: Entry, before: int, after: int, status: ArticleStatus, allocated: int | None = None, reason: str | None = None
) -> ArticleOutcome:
    rank = float(e.article.metadata[NORMALIZED_RANK])
    return ArticleOutcome(
        kb_id=e.key, title=e.article.title, normalized_rank=rank, article_rank=e.rank, tokens_before=before,
        allocated=allocated, tokens_after=after, status=status, fallback_reason=reason,
    )  # fmt: skip
