"""Replies that repeat the prompt instead of answering: the source list alone, an article copied as the prompt
lays it out, or a copy of the source list after the answer.

Example:
    >>> sources = [{"title": "Tables"}, {"title": "Charts"}]
    >>> echoes_sources("[1] Tables\\n[2] Charts", [s["title"] for s in sources])
    True
    >>> strip_echoed_sources("Use Table [1].\\n\\nSources:\\n[1] Tables", ["Tables", "Charts"])
    'Use Table [1].'
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from ragidx.agent.guards.base import GuardInput, GuardResult

# A list item of an echoed source list: "[1] Tables", "[2] [Retrieved Context]", "Sources:".
_LIST_MARKERS = re.compile(r"^(?:[-*]\s*)?(?:\[\d+\]\s*)+")
_PLACEHOLDER = re.compile(r"^(?:\[[^\]]*\]|\(?[^\w\s]*\)?|sources?:?)$", re.I)

SOURCES_WORDS = ("sources", "source", "источники")
"""Words that head a copied source list: "Sources:", "**Sources:**", "Источники:" alone on a line."""
SOURCES_HEADING = re.compile(
    rf"^[ \t]*(?:\*\*)?(?:{'|'.join(SOURCES_WORDS)})(?:\*\*)?[ \t]*:?[ \t]*(?:\*\*)?[ \t]*$", re.I | re.M
)


def _folded(titles: Sequence[str]) -> set[str]:
    return {t.casefold() for t in titles}


def echoes_sources(text: str, titles: Sequence[str]) -> bool:
    """Whether a reply only repeats the source list ("[1] Tables\\n[2] Charts", or "[1] [Retrieved Context]"
    lines) of the articles titled ``titles`` (as the prompt wrote them): a small model's way of having nothing
    to say about an off-topic question."""
    shown = _folded(titles)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines or not any(_LIST_MARKERS.match(line) for line in lines):
        return False
    items = [_LIST_MARKERS.sub("", line).strip().rstrip(".").casefold() for line in lines]
    return all(item in shown or _PLACEHOLDER.match(item) for item in items)


def copies_articles(text: str, titles: Sequence[str]) -> bool:
    """Whether a reply copies an article as the prompt lays it out ("[1] Tables" then a ``<article>`` line):
    a small model continuing its prompt over articles that do not answer the question, not an answer."""
    shown = _folded(titles)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return any(
        _LIST_MARKERS.match(line) is not None
        and _LIST_MARKERS.sub("", line).strip().casefold() in shown
        and html.unescape(following).casefold() == "<article>"  # the reply may still write "&lt;article&gt;"
        for line, following in zip(lines, lines[1:], strict=False)
    )


def strip_echoed_sources(text: str, titles: Sequence[str]) -> str:
    """``text`` without a trailing copy of the prompt's source list ("…\\n\\nSources:\\n[2] Tables\\n[3] Charts"),
    which small models append after their answer; the list below the answer is ragidx's own."""
    for heading in reversed(list(SOURCES_HEADING.finditer(text))):
        body, listed = text[: heading.start()].rstrip(), text[heading.end() :]
        if body and echoes_sources(listed, titles):
            return body
    return text


class EchoedSourceList:
    """Drops a copy of the prompt's source list after the answer (:func:`strip_echoed_sources`).

    Example:
        >>> from ragidx.article import Article
        >>> reply = "Use Table [1].\\nSources:\\n[1] Tables"
        >>> EchoedSourceList().check(GuardInput("q", reply, [Article("t", "Tables", "", "")])).text
        'Use Table [1].'
    """

    name = "echoed_source_list"

    def check(self, inp: GuardInput) -> GuardResult:
        kept = strip_echoed_sources(inp.text, inp.shown_titles())
        if kept == inp.text:
            return GuardResult(inp.text)
        return GuardResult(kept, reason="a copy of the prompt's source list after the answer was dropped")


class SourceListOnly:
    """Sets aside a reply that only repeats the list of articles (:func:`echoes_sources`)."""

    name = "source_list_only"

    def check(self, inp: GuardInput) -> GuardResult:
        if echoes_sources(inp.text, inp.shown_titles()):
            return GuardResult(inp.text, not_found=True, reason="the model only repeated the list of articles")
        return GuardResult(inp.text)


class ArticleCopy:
    """Sets aside a reply that copies the articles as the prompt lays them out (:func:`copies_articles`)."""

    name = "article_copy"

    def check(self, inp: GuardInput) -> GuardResult:
        if copies_articles(inp.text, inp.shown_titles()):
            reason = "the model copied the articles as the prompt shows them instead of answering"
            return GuardResult(inp.text, not_found=True, reason=reason)
        return GuardResult(inp.text)
