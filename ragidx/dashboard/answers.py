"""An ``Answer`` as the rows, numbers and notes the chat page shows. Plain data, no Streamlit.

Example:
    >>> from ragidx.agent.answer import Answer, Citation
    >>> a = Answer(question="q", text="Use Insert > Table [1].", citations=[Citation(1, "k", "Tables", "https://x")])
    >>> citation_lines(a)
    ['[1] [Tables](https://x)']
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragidx.agent.answer import Answer, Progress
from ragidx.budget.report import BudgetReport
from ragidx.budget.run import BELOW_FLOOR
from ragidx.dashboard.documents import document_link
from ragidx.safe_text import printable, web_url
from ragidx.safety.injection import flags_of

__all__ = [
    "AnswerStream",
    "BudgetView",
    "article_rows",
    "budget_view",
    "citation_lines",
    "default_call",
    "flash_reasons",
    "safe_markdown",
    "guard_caption",
    "token_rows",
]

FLASH_REASON = "flash_reason"  # the flash reranker's metadata key (ragidx.retrieval.flash.reranker)
FLASH_EXCERPT = "flash_excerpt"


def _md_escape(text: str) -> str:
    return printable(text).replace("[", "\\[").replace("]", "\\]")


# Markdown link syntax and the target it points at: an inline link or image "](target", an autolink "<scheme:",
# a reference definition "[label]: target" at the start of a line.
_INLINE_TARGET = re.compile(r"\]\(\s*<?([^)\s>]*)")
_AUTOLINK = re.compile(r"<([A-Za-z][A-Za-z0-9+.\-]{1,31}:[^>\s]*)>")
_REFERENCE = re.compile(r"^( {0,3})\[([^\]\n]+)\]:[ \t]*<?(\S*?)>?(?=\s|$)", re.MULTILINE)


def safe_markdown(text: str) -> str:
    """Markdown from the model or an article, fit for ``st.markdown``: control and bidi characters shown as
    escapes, and every link or image whose target is not an http(s) URL (``javascript:``, ``data:``, relative)
    left as its plain text.

    Example:
        >>> safe_markdown("See [the page](https://x.org/a) or [this](javascript:alert(1)) <data:text/html,x>")
        'See [the page](https://x.org/a) or [this]\\\\(javascript:alert(1)) \\\\<data:text/html,x>'
    """

    def inline(m: re.Match[str]) -> str:
        return m.group(0) if web_url(m.group(1)) else "]\\(" + m.group(0)[2:]

    def autolink(m: re.Match[str]) -> str:
        return m.group(0) if web_url(m.group(1)) else "\\" + m.group(0)

    def reference(m: re.Match[str]) -> str:
        return m.group(0) if web_url(m.group(3)) else f"{m.group(1)}\\{m.group(0)[len(m.group(1)) :]}"

    text = printable(text, keep_newlines=True)
    return _REFERENCE.sub(reference, _AUTOLINK.sub(autolink, _INLINE_TARGET.sub(inline, text)))


def citation_lines(answer: Answer, *, served_files: bool = False) -> list[str]:
    """``[n] [title](url)`` per cited article, then the section or page of a document the citation points at (its
    url opens there: ``manual.pdf#page=12``). The kb_id stands in for a missing URL and for one that is not
    http(s), which is never made a link (``javascript:``, ``data:``). Titles, ids and URLs are escaped.

    ``served_files``: the dashboard serves ingested files (:mod:`ragidx.dashboard.documents`), so a ``file://``
    citation links to the dashboard's copy at its place (``documents/manual.pdf#page=12``)."""
    lines = []
    for c in answer.citations:
        title = _md_escape(c.title or c.kb_id)
        link = web_url(c.url) or (document_link(c.kb_id, c.url) if served_files else None)
        line = f"[{c.number}] [{title}]({link})" if link else f"[{c.number}] {title} ({_md_escape(c.kb_id)})"
        lines.append(f"{line} — {_md_escape(c.where)}" if c.where else line)
    return lines


def article_rows(answer: Answer) -> list[dict[str, Any]]:
    """One row per article the model was shown, best first, with its ranks and whether it is cited."""
    cited = {c.kb_id: c.number for c in answer.citations}
    rows = []
    for i, article in enumerate(answer.articles, start=1):
        meta = article.get("metadata") or {}
        row: dict[str, Any] = {
            "#": i,
            "title": printable(str(article.get("title") or article.get("kb_id", ""))),
            "rerank_score": _float(meta.get("rerank_score")),
            "normalized_rank": _float(meta.get("normalized_rank")),
            "cited": f"[{cited[article.get('kb_id', '')]}]" if article.get("kb_id") in cited else "",
        }
        if meta.get(FLASH_REASON):
            row["flash_reason"] = printable(str(meta[FLASH_REASON]))
        if flags_of(meta):  # instruction-like text in it, replaced in what the model read
            row["injection_flags"] = ", ".join(flags_of(meta))
        row["kb_id"] = printable(str(article.get("kb_id", "")))
        rows.append(row)
    return rows


def flash_reasons(answer: Answer) -> list[tuple[str, str]]:
    """``(title, reason)`` for every article the flash reranker explained; empty when it was off."""
    out = []
    for article in answer.articles:
        meta = article.get("metadata") or {}
        if meta.get(FLASH_REASON):
            out.append(
                (_md_escape(str(article.get("title") or article.get("kb_id"))), printable(str(meta[FLASH_REASON])))
            )
    return out


def _float(value: Any) -> float | None:
    try:
        return None if value is None else round(float(value), 4)
    except (TypeError, ValueError):
        return None


def default_call(reports: Sequence[BudgetReport]) -> int:
    """The LLM call to show first: the last one whose budget measured articles, else the last call."""
    for i in range(len(reports) - 1, -1, -1):
        if reports[i].articles:
            return i
    return max(0, len(reports) - 1)


def token_rows(report: BudgetReport) -> list[dict[str, Any]]:
    """Long-form rows for the tokens chart: each article's tokens ``before`` and ``after`` the budget."""
    rows = []
    for i, a in enumerate(report.articles, start=1):
        label = f"{i}. {printable(a.title or a.kb_id)}"
        for stage, tokens in (("before", a.tokens_before), ("after", a.tokens_after)):
            rows.append(
                {
                    "article": label,
                    "stage": stage,
                    "tokens": tokens,
                    "status": a.status,
                    "normalized_rank": a.normalized_rank,
                }
            )
    return rows


@dataclass(frozen=True)
class BudgetView:
    """What the budget did for one LLM call, as the page states it."""

    compressor: str
    path: str
    tokens_before: int
    tokens_after: int
    context_window: int
    trigger_tokens: int
    target_tokens: int
    hard_limit_tokens: int
    notes: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # by the relevance floor: the normal path, no warning

    @property
    def used_pct(self) -> float:
        return 100.0 * self.tokens_after / self.context_window if self.context_window else 0.0


def budget_view(report: BudgetReport, answer: Answer | None = None) -> BudgetView:
    """Summary of ``report``; ``notes`` name every fallback (model, compressor output, recommendation),
    ``left_out`` the articles the relevance floor kept from the prompt (not a fallback: they scored too low)."""
    notes, left_out = [], []
    if report.fallback_recommended:
        notes.append(f"budget recommends a larger model: {report.fallback_reason or 'material does not fit'}")
    for a in report.articles:
        if a.fallback_reason == BELOW_FLOOR:
            left_out.append(printable(a.title or a.kb_id))
        elif a.fallback_reason:
            notes.append(f"{printable(a.title or a.kb_id)}: compressor output replaced ({a.fallback_reason})")
    if answer is not None and answer.fallback_reason:
        notes.append(f"answered by fallback model {answer.model!r}: {answer.fallback_reason}")
    return BudgetView(
        left_out=left_out,
        compressor=report.compressor or "none",
        path=" → ".join(report.path) if report.path else "—",
        tokens_before=report.tokens_before,
        tokens_after=report.tokens_after,
        context_window=report.context_window,
        trigger_tokens=report.trigger_tokens,
        target_tokens=report.target_tokens,
        hard_limit_tokens=report.hard_limit_tokens,
        notes=notes,
    )


class AnswerStream:
    """Split ``Engine.stream_ask`` output into its text pieces, its progress and the final ``Answer``.

    ``on_progress`` is called with each :class:`~ragidx.agent.answer.Progress` item (a search ran, a
    prompt goes to the model) as it arrives. The pieces are what the engine lets through (the guard profile's
    stream filter): joined, the answer's text as it stands, never words that the answer withdraws.

    Example:
        >>> s = AnswerStream(iter(["Hel", "lo", Answer(question="q", text="Hello")]))
        >>> "".join(s.pieces()), s.answer.text
        ('Hello', 'Hello')
    """

    def __init__(self, items: Iterable[Any], on_progress: Callable[[Progress], None] | None = None) -> None:
        self._items = items
        self._on_progress = on_progress
        self._answer: Answer | None = None

    def pieces(self) -> Iterator[str]:
        for item in self._items:
            if isinstance(item, str):
                if item:
                    yield item
            elif isinstance(item, Progress):
                if self._on_progress is not None:
                    self._on_progress(item)
            else:
                self._answer = item

    @property
    def answer(self) -> Answer:
        if self._answer is None:
            raise RuntimeError("the stream ended without an Answer; consume pieces() to the end first")
        return self._answer


def guard_caption(answer: Answer) -> str:
    """One line on the answer's guard profile and the guards that fired (empty when the answer has no profile).

    Example:
        >>> a = Answer(question="q", text="t", guard_profile={"profile": "endpoint", "enabled": [], "disabled": []},
        ...            guards=[{"name": "source_talk", "reason": "a sentence was dropped"}])
        >>> guard_caption(a)
        'Guards: endpoint · fired: source_talk (a sentence was dropped)'
    """
    profile = answer.guard_profile
    if not profile:
        return ""
    name = str(profile.get("profile", "?"))
    changes = [f"+{n}" for n in profile.get("enabled", [])] + [f"-{n}" for n in profile.get("disabled", [])]
    label = f"{name} ({', '.join(changes)})" if changes else name
    fired = "; ".join(f"{g['name']} ({g['reason']})" for g in answer.guards) or "none fired"
    return f"Guards: {label} · " + (f"fired: {fired}" if answer.guards else fired)
