"""Query-aware extractive compression: keep the sentences that answer the question, no LLM.

Each sentence is scored by BM25 against the question's terms (stemmed; document frequencies over all
sentences of the batch), with extra weight for the question's entities and numbers (capitalized words,
digits), a small prior for early sentences and for sentences naming the article's title. The best
sentences are kept in their original order until the target is filled; the next best one is cut to
fill what is left (ending in "…"), so the result is within the target and within a few tokens of it.
Sentence costs are estimated from their share of the article's characters; the assembled result is
then counted exactly and adjusted, the estimates re-scaled by what each draft really cost, a few times at
most; after the first draft only what changed from the draft before is tokenized (exact for
word-additive counters, see ``TokenCounter.count_edited``).

Example:
    >>> from ragidx.article import MATCHED_SPANS, Article
    >>> text = "Paris is big. The Eiffel Tower opened in 1889. It is made of iron."
    >>> ExtractiveCompressor().compress(Article("a", "Eiffel Tower", "", text), 12, "When did it open?")
    'The Eiffel Tower opened in 1889.'
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ragidx.article import MATCHED_SPANS, Article
from ragidx.budget.sentences import Unit, split_units
from ragidx.providers.tokenizer import TokenCounter
from ragidx.terms import stem, terms

__all__ = ["ExtractiveCompressor"]

_ENTITY = re.compile(r"\b(?:[A-ZА-ЯЁ][\w'’-]*|\d[\d.,:/-]*)", re.UNICODE)
_MIN_FILL_TOKENS = 4
ELLIPSIS = "…"
"""Ends a sentence that was cut to fit (one token), so the reader knows text is missing."""
_FIT_ROUNDS = 6
_WORD_BACKOFF_CHARS = 24
_GOOD_ENOUGH_TOKENS = 6
"""A draft this close under the target ends the fit once a fuller one went over (a cut sentence changes
by whole words, so the fit could step back and forth across the target)."""
_LINE_BREAK_CHARS = 3
_UNIT_EDGE_CHARS = 3
"""Extra characters a unit's cost estimate counts per line break before it and for its edges (measured on
the bundled EN/RU help pages: fewer fitting rounds than characters alone)."""


@dataclass(frozen=True)
class _Doc:
    units: list[Unit]
    unit_terms: list[list[str]]


def _split_doc(text: str) -> _Doc:
    units = split_units(text)
    return _Doc(units, [terms(u.text) for u in units])


class ExtractiveCompressor:
    """Sentence extraction by BM25 relevance to the question; fast (a few ms for 20 articles).

    Args:
        token_counter: Counts and cuts tokens; the default is tiktoken ``cl100k_base``.
        k1, b: BM25 parameters.
        entity_boost: Weight multiplier for question terms that are names or numbers (1.0 = none: on
            HotpotQA questions 0-249, 2.0 kept fewer answers at 25% and 10%; neutral on 250-499).
        position_prior: Bonus (in units of the mean term weight) for the first sentence, decaying.
        title_boost: Bonus (same units) for sentences that share terms with the article's title.
        match_boost: Bonus (same units) for sentences inside the passages retrieval matched (the article's
            ``matched_spans``): the best passage gets it whole, the next ones half and a third. 0 turns it off.
        max_cached_docs: Articles whose sentences and terms are remembered (each LLM call of a turn
            compresses the same articles again).

    Example:
        >>> comp = ExtractiveCompressor()
        >>> comp.name
        'extractive'
    """

    name = "extractive"

    def __init__(
        self,
        token_counter: TokenCounter | None = None,
        *,
        k1: float = 1.2,
        b: float = 0.5,
        entity_boost: float = 1.0,
        position_prior: float = 0.5,
        title_boost: float = 0.3,
        match_boost: float = 4.0,
        max_cached_docs: int = 256,
    ) -> None:
        self.tokens = token_counter or TokenCounter()
        self.k1 = k1
        self.b = b
        self.entity_boost = entity_boost
        self.position_prior = position_prior
        self.title_boost = title_boost
        self.match_boost = match_boost
        self.max_cached_docs = max_cached_docs
        # The article's sentences and their terms, remembered for the next LLM calls of the turn.
        self._doc = functools.lru_cache(maxsize=max_cached_docs)(_split_doc)

    # --- protocol -------------------------------------------------------------------------------------
    def compress(self, article: Article, target_tokens: int, question: str) -> str:
        return self.compress_many([article], [target_tokens], question)[0]

    async def acompress(self, article: Article, target_tokens: int, question: str) -> str:
        return self.compress(article, target_tokens, question)

    def compress_many(self, articles: Sequence[Article], targets: Sequence[int], question: str) -> list[str]:
        """Compress a batch with term statistics shared across its articles."""
        docs = [self._doc(a.content) for a in articles]
        weights = self._query_weights(question, docs)
        out: list[str] = []
        for article, doc, target in zip(articles, docs, targets, strict=True):
            total = self.tokens.count(article.content)
            if total <= target:
                out.append(article.content)
                continue
            scores = self._scores(doc, weights, article.title, article.metadata.get(MATCHED_SPANS) or ())
            out.append(self._select(article.content, doc, scores, target, total))
        return out

    async def acompress_many(self, articles: Sequence[Article], targets: Sequence[int], question: str) -> list[str]:
        return self.compress_many(articles, targets, question)

    # --- scoring --------------------------------------------------------------------------------------
    def _query_weights(self, question: str, docs: Sequence[_Doc]) -> dict[str, float]:
        q_terms = set(terms(question))
        if not q_terms:
            return {}
        n = sum(len(d.units) for d in docs) or 1
        df: Counter[str] = Counter()
        for d in docs:
            for ts in d.unit_terms:
                if common := q_terms.intersection(ts):
                    df.update(common)
        entities = {stem(w.lower()) for w in _ENTITY.findall(question[1:])} | {
            t for t in q_terms if any(ch.isdigit() for ch in t)
        }
        weights: dict[str, float] = {}
        for t in q_terms:
            idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
            weights[t] = idf * (self.entity_boost if t in entities else 1.0)
        return weights

    def _scores(
        self, doc: _Doc, weights: dict[str, float], title: str, spans: Sequence[Sequence[int]] = ()
    ) -> list[float]:
        lengths = [len(ts) for ts in doc.unit_terms]
        avg = (sum(lengths) / len(lengths)) if lengths else 1.0
        mean_w = (sum(weights.values()) / len(weights)) if weights else 1.0
        title_terms = set(terms(title))
        scores: list[float] = []
        is_query_term = weights.__contains__
        prior, k1, b, boost = self.position_prior * mean_w, self.k1, self.b, self.title_boost * mean_w
        for pos, ts in enumerate(doc.unit_terms):
            s = prior / (1 + pos)
            hits = list(filter(is_query_term, ts))
            if hits:
                norm = k1 * (1 - b + b * len(ts) / (avg or 1.0))
                # Each hit term once, in order of first appearance (as Counter would, cheaper for a few).
                s += sum(weights[t] * f * (k1 + 1) / (f + norm) for t in dict.fromkeys(hits) if (f := hits.count(t)))
            if title_terms and not title_terms.isdisjoint(ts):
                s += boost
            scores.append(s)
        if self.match_boost and spans:
            for i, unit in enumerate(doc.units):
                rank = next((r for r, (a, z) in enumerate(spans) if unit.start < z and unit.end > a), None)
                if rank is not None:
                    scores[i] += self.match_boost * mean_w / (1 + rank)
        return scores

    # --- selection ------------------------------------------------------------------------------------
    def _select(
        self,
        text: str,
        doc: _Doc,
        scores: list[float],
        target: int,
        total: int,
    ) -> str:
        """Best units in score order, estimated by their share of characters, then fitted exactly.

        Unit costs are estimated (``total`` tokens spread over the units by their characters, line
        breaks and edges) instead of counted one by one. Each draft is counted exactly, and the
        estimates re-scaled by what the draft (then the units the last round added or removed) really
        cost; over the target, the partial unit is trimmed or the weakest units dropped; under it, the
        next best units are added and the one that does not fit whole is cut to fill the rest. A few
        rounds at most (a draft within ``_GOOD_ENOUGH_TOKENS`` under the target ends them once a fuller
        one went over); the result never exceeds the target and is within a few tokens of it.
        """
        if target <= 0 or not doc.units:
            return ""
        # A unit costs its share of the article's tokens by its size: its characters with the separator
        # before it, plus a little for each line break and for the unit's own edges (short lines, such as
        # headings and function names, cost more tokens per character than prose).
        ends = [0, *(u.end for u in doc.units[:-1])]
        size = [
            u.end - e + _LINE_BREAK_CHARS * text.count("\n", e, u.start) + _UNIT_EDGE_CHARS
            for u, e in zip(doc.units, ends, strict=True)
        ]
        ratio = total / max(1.0, sum(size))  # tokens per character (of size)
        cost = [w * ratio for w in size]
        order = sorted(range(len(doc.units)), key=scores.__getitem__, reverse=True)  # ties: text order (stable)
        chosen: list[int] = []  # in score order: the last is the weakest
        in_chosen: set[int] = set()
        scale = 1.0  # actual tokens per estimated token, learnt from the first draft

        def fill(rest: float) -> tuple[int, int] | None:
            """Add the best units left that fit ``rest`` whole; return the partial that fills the rest."""
            skipped: int | None = None
            for i in order:
                if i in in_chosen:
                    continue
                need = cost[i] * scale
                if need <= rest:
                    chosen.append(i)
                    in_chosen.add(i)
                    rest -= need
                    continue
                if rest >= max(_MIN_FILL_TOKENS, need / 2):
                    # A good sentence that half fits is worth more than a worse one that fits whole.
                    return i, int(rest)
                if skipped is None:
                    skipped = i
                if rest < _MIN_FILL_TOKENS:
                    break
            # Nothing more fits whole: the best unit left fills what remains, cut.
            return (skipped, int(rest)) if skipped is not None and rest >= _MIN_FILL_TOKENS else None

        partial = fill(target)
        result, n = "", 0
        best, best_n = "", -1  # the fullest draft so far within the target
        last_estimate: float = 0.0
        last_n, last_cut = 0, 0
        trims = 0
        for round_no in range(_FIT_ROUNDS):
            draft = self._assemble(text, doc.units, in_chosen, partial, ratio * scale)
            # A later draft differs from the one before in a few sentences: count only that region.
            n = self.tokens.count(draft) if round_no == 0 else self.tokens.count_edited(result, n, draft)
            result = draft
            # Separators between kept units are dropped and escapes are uneven: learn what the estimates
            # are worth, first over the draft, then over what the last round added or removed.
            estimate, cut = sum(map(cost.__getitem__, chosen)), (partial[1] if partial else 0)
            if round_no == 0 and estimate:
                scale = min(4.0, max(0.25, (n - cut) / estimate))
            elif abs(estimate - last_estimate) >= _MIN_FILL_TOKENS:
                scale = min(4.0, max(0.25, (n - last_n - cut + last_cut) / (estimate - last_estimate)))
            last_estimate, last_n, last_cut = estimate, n, cut
            if n > target:
                if best_n >= 0 and target - best_n <= _GOOD_ENOUGH_TOKENS:
                    # Word-sized steps of the cut unit jump over the target: a draft this close is kept.
                    result, n = best, best_n
                    break
                over: float = n - target
                if partial is not None and partial[1] - over - trims >= _MIN_FILL_TOKENS:
                    # A cut piece can cost a token more than its budget (the "…", how it joins the
                    # next text): trim by a growing step so the fit doesn't creep down a token a round.
                    partial = (partial[0], partial[1] - int(over) - trims)
                    trims += 1
                    continue
                if partial is not None:
                    over -= partial[1]
                    partial = None
                # Drop the weakest units until their estimate frees what is over; the last one is cut.
                while over > 0 and chosen:
                    weakest = chosen.pop()
                    in_chosen.discard(weakest)
                    freed = cost[weakest] * scale
                    if freed > over:
                        keep = math.floor(freed - over)
                        partial = (weakest, keep) if keep >= _MIN_FILL_TOKENS else None
                    over -= freed
            elif target - n >= _MIN_FILL_TOKENS:
                if n > best_n:
                    best, best_n = result, n
                rest: float = target - n
                before = len(chosen)
                if partial is not None:
                    missing = cost[partial[0]] * scale - partial[1]  # what the cut unit lacks to be whole
                    if rest <= missing:
                        partial = (partial[0], partial[1] + int(rest))
                        continue
                    chosen.append(partial[0])
                    in_chosen.add(partial[0])
                    rest -= max(0.0, missing)
                partial = fill(rest)
                if partial is None and len(chosen) == before:
                    break  # nothing left to add
            else:
                break
        for _ in range(_FIT_ROUNDS):
            if n <= target or len(result) < 2:
                break
            # Still a little over: shorten the end by about as much, at a word (only the end is re-counted).
            keep = len(result) - max(1, math.ceil((n - target + 1) / (ratio * scale)))
            shorter = _at_word(result, keep) if keep > 0 else ""
            if not shorter or shorter == result:
                break
            n, result = self.tokens.count_edited(result, n, shorter), shorter
        if n > target:
            result = self.tokens.truncate(result, target)
        return result

    def _assemble(
        self,
        text: str,
        units: list[Unit],
        chosen: set[int],
        partial: tuple[int, int] | None,
        per_char: float,
    ) -> str:
        cut_at = partial[0] if partial is not None else -1
        parts: list[str] = []
        last = -1  # the last unit written
        run_from = run_to = -1  # whole units next to each other, not written yet (one slice of the text)
        for i in sorted(chosen if partial is None else chosen | {cut_at}):
            if i != cut_at and i == run_to + 1 and run_from >= 0:
                run_to = i
                continue
            if run_from >= 0:
                parts.append(text[units[run_from].start : units[run_to].end])
                last, run_from = run_to, -1
            piece = ""
            if i == cut_at:
                assert partial is not None
                piece = _cut(units[i].text, partial[1], per_char)
                if not piece:
                    continue
            if last >= 0:
                gap = text[units[last].end : units[i].start]
                # Adjacent units keep their own separator; across a gap, a line break if one was skipped.
                parts.append(gap if last == i - 1 else ("\n" if "\n" in gap else " "))
            if piece:
                parts.append(piece)
                last = i
            else:
                run_from = run_to = i
        if run_from >= 0:
            parts.append(text[units[run_from].start : units[run_to].end])
        return "".join(parts)


def _cut(sentence: str, budget: int, per_char: float) -> str:
    """A prefix of ``sentence`` of about ``budget`` tokens at ``per_char`` tokens a character, ending in
    "…" when cut, at the end of a word if one ends near (the draft it goes into is counted exactly, and
    the budget corrected)."""
    chars = max(0, int((budget - 1) / per_char))
    return sentence if chars >= len(sentence) else _at_word(sentence, chars)


def _at_word(text: str, chars: int) -> str:
    """``text`` cut to at most ``chars`` characters, at the end of a word if one ends within
    ``_WORD_BACKOFF_CHARS``, ending in "…" ("" when nothing is left)."""
    piece = text[:chars]
    space = piece.rfind(" ")
    if space >= max(chars // 2, chars - _WORD_BACKOFF_CHARS):  # end at a word unless it is long
        piece = piece[:space]
    piece = piece.rstrip()
    return piece + ELLIPSIS if piece else ""
