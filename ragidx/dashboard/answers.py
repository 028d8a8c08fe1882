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
    "budget_sentence",
    "budget_view",
    "citation_lines",
    "cited_passages",
    "escape_markdown",
    "default_call",
    "exact_figures",
    "flash_reasons",
    "plain_reason",
    "plain_summary",
    "queue_text",
    "safe_markdown",
    "guard_caption",
    "stage_text",
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


PASSAGE_CONTEXT_CHARS = 280
"""Text shown on each side of a quoted sentence in :func:`cited_passages` (cut at a word)."""


def cited_passages(answer: Answer) -> list[tuple[str, str]]:
    """``(heading, markdown)``, both escaped for ``st.markdown``, per citation that quotes its article: the sentence
    the citation rests on, highlighted in the text around it as the model was shown the article (the article's own
    page opens at the same sentence: the citation's link carries a text fragment). Article text is shown, never
    rendered as links or directives.

    Example:
        >>> from ragidx.agent.answer import Answer, Citation
        >>> article = {"kb_id": "k", "title": "Backups", "content": "Backups run nightly. They are kept 35 days."}
        >>> cite = Citation(1, "k", "Backups", "https://x", quote="They are kept 35 days.")
        >>> cited_passages(Answer(question="q", text="35 days [1].", citations=[cite], articles=[article]))
        [('\\\\[1\\\\] Backups', 'Backups run nightly. :orange-background[They are kept 35 days.]')]
    """
    texts = {str(a.get("kb_id", "")): str(a.get("content") or "") for a in answer.articles}
    out = []
    for c in answer.citations:
        text = texts.get(c.kb_id, "")
        at = text.find(c.quote) if c.quote else -1
        if at < 0:
            continue
        end = at + len(c.quote)
        before = text[max(0, at - PASSAGE_CONTEXT_CHARS) : at]
        after = text[end : end + PASSAGE_CONTEXT_CHARS]
        if at > PASSAGE_CONTEXT_CHARS:
            before = "… " + before.split(None, 1)[-1] if " " in before else before
        if end + PASSAGE_CONTEXT_CHARS < len(text):
            after = after.rsplit(None, 1)[0] + " …" if " " in after else after
        shown = " ".join(
            part
            for part in (_escape_text(before), f":orange-background[{_escape_text(c.quote)}]", _escape_text(after))
            if part
        )
        out.append((_escape_text(f"[{c.number}] {c.title or c.kb_id}"), shown))
    return out


_MARKDOWN = re.compile(r"([\\`*_{}\[\]<>()#+!|~:$])")
"""Characters that make Markdown or a Streamlit directive (``:colour[...]``) out of plain text."""


def escape_markdown(text: str) -> str:
    """Plain text for ``st.markdown``: text from the knowledge base makes no links, emphasis, formulas or directives.

    Example:
        >>> escape_markdown("[x](javascript:1) *a* :red[b]")
        '\\\\[x\\\\]\\\\(javascript\\\\:1\\\\) \\\\*a\\\\* \\\\:red\\\\[b\\\\]'
    """
    return _MARKDOWN.sub(r"\\\1", text)


def _escape_text(text: str) -> str:
    """Article text for ``st.markdown`` inside a line: one line (:func:`escape_markdown`), a list or heading marker at
    its start escaped too."""
    line = escape_markdown(" ".join(printable(text).split()))
    return re.sub(r"^(\d+)([.)])|^([-+>])", lambda m: f"{m[1]}\\{m[2]}" if m[1] else f"\\{m[3]}", line)


ARTICLE_COLUMNS = {
    "title": "Article",
    "score": "Relevance score",
    "rank": "Place (0 best, 1 last)",
    "cited": "Cited as",
    "flash_reason": "Why the reranker kept it",
    "flags": "Instruction-like text",
    "kb_id": "Id",
}
"""The article table's columns, in words (the keys are what :func:`article_rows` computes them from)."""


def article_rows(answer: Answer) -> list[dict[str, Any]]:
    """One row per article the model was shown, best first: its relevance score and place among the results
    (the reranker's ``rerank_score`` and ``normalized_rank``) and whether it is cited; columns named in words."""
    cited = {c.kb_id: c.number for c in answer.citations}
    c = ARTICLE_COLUMNS
    rows = []
    for i, article in enumerate(answer.articles, start=1):
        meta = article.get("metadata") or {}
        row: dict[str, Any] = {
            "#": i,
            c["title"]: printable(str(article.get("title") or article.get("kb_id", ""))),
            c["score"]: _float(meta.get("rerank_score")),
            c["rank"]: _float(meta.get("normalized_rank")),
            c["cited"]: f"[{cited[article.get('kb_id', '')]}]" if article.get("kb_id") in cited else "",
        }
        if meta.get(FLASH_REASON):
            row[c["flash_reason"]] = printable(str(meta[FLASH_REASON]))
        if flags_of(meta):  # instruction-like text in it, replaced in what the model read
            row[c["flags"]] = ", ".join(flags_of(meta))
        row[c["kb_id"]] = printable(str(article.get("kb_id", "")))
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


# --- in plain words --------------------------------------------------------------------------------------------
ANSWER_CHECK = "answer_check"  # the gate's name (ragidx.agent.guards.gates.AnswerCheck)
_FIGURES = re.compile(r"\s*\((?:log-odds|score|margin)[^)]*\)")


def plain_reason(reason: str | None) -> str:
    """Why an answer is "not found", for the person who asked: the reason without its figures (the answer
    check's log-odds and margin stay in the engineering view).

    Example:
        >>> plain_reason("the model judged that the articles shown do not answer the question (log-odds -0.99 < "
        ...              "margin +0.20)")
        'the model judged that the articles shown do not answer the question'
    """
    return printable(_FIGURES.sub("", reason or "")).strip()


def stage_text(progress: Progress) -> str:
    """What a turn is doing, in words, from one :class:`~ragidx.agent.answer.Progress` item: searching, deciding,
    checking the articles found. No time estimate: the page shows the time that has really passed.

    Example:
        >>> stage_text(Progress("search", query="page numbers", articles=("Page Numbers", "Footers")))
        'Searching the knowledge base: 2 articles found for “page numbers”'
        >>> stage_text(Progress("prompt", call="answer", tokens=3168, articles=("A", "B"), expected_s=21.0))
        'Checking the 2 articles found against your question, then answering'
    """
    if progress.stage == "search":
        query = printable(progress.query)
        if progress.error:
            return f"Searching the knowledge base: a search for “{query}” failed"
        return f"Searching the knowledge base: {_count(len(progress.articles), 'article')} found for “{query}”"
    if progress.call == "answer":
        if not progress.articles:
            return "Writing the answer"
        n = len(progress.articles)
        found = "the article found" if n == 1 else f"the {n} articles found"
        return f"Checking {found} against your question, then answering"
    if progress.call == "plan":
        return "Planning the searches"
    return "Deciding whether to search again"


def queue_text(waiting: int, busy: int, slots: int) -> str | None:
    """Where a question stands in the model queue when it is asked (``ModelQueue.stats()``), or None when the
    model is free for it at once.

    Example:
        >>> queue_text(waiting=1, busy=1, slots=1)
        'Waiting for the model: 2 questions are ahead of yours'
        >>> queue_text(waiting=0, busy=0, slots=1) is None
        True
    """
    if busy < slots and not waiting:
        return None
    ahead = waiting + busy - slots + 1
    return f"Waiting for the model: {_count(ahead, 'question')} {'is' if ahead == 1 else 'are'} ahead of yours"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


_STEPS = {
    "below_floor": "articles that scored far below the best one were left out",
    "under_trigger": "nothing had to be shortened",
    "memory_summarized": "earlier turns of the conversation were summarised",
    "deduplicated": "passages repeated across articles were removed",
    "compressed": "long articles were shortened to their passages closest to the question",
    "truncated": "an article was cut off at its end",
    "dropped": "the lowest-ranked articles were left out to make room",
    "history_dropped": "older turns of the conversation were left out",
    "tool_calls_dropped": "earlier searches were left out",
    "fallback_recommended": "it did not fit well: a model with a larger window would read more",
    "nothing_to_compress": "there was nothing left to shorten",
}


def budget_sentence(report: BudgetReport) -> str:
    """What the context budget did for one model call, as one sentence.

    Example:
        >>> budget_sentence(BudgetReport(context_window=4096, tokens_before=9740, tokens_after=3168,
        ...                              path=["deduplicated", "compressed"]))
        'The model read 3,168 of the 4,096 tokens its window holds (77%; 9,740 before the budget): passages \
repeated across articles were removed, and long articles were shortened to their passages closest to the question.'
    """
    window = report.context_window
    share = f"{100 * report.tokens_after / window:.0f}%" if window else "?"
    before = f"; {report.tokens_before:,} before the budget" if report.tokens_before > report.tokens_after else ""
    steps = [_STEPS.get(step, step.replace("_", " ")) for step in report.path]
    said = ", and ".join([", ".join(steps[:-1]), steps[-1]] if len(steps) > 1 else steps)
    return f"The model read {report.tokens_after:,} of the {window:,} tokens its window holds ({share}{before})" + (
        f": {said}." if said else "."
    )


def plain_summary(answer: Answer) -> list[str]:
    """How the answer was made, in sentences: what the model read and cited, what was left out, what the budget
    did, the answer check, the checks on the reply, the model and the time. Figures that matter are in words
    with their units; the raw ones are in :func:`exact_figures`."""
    out = []
    n, cited = len(answer.articles), len(answer.citations)
    if not n:
        out.append("The search found no article for this question.")
    else:
        names = "; ".join(printable(c.title or c.kb_id) for c in answer.citations)
        if n == 1:
            what = f"cited it ({names})" if cited else "did not cite it"
        else:
            what = f"cited {cited} of them ({names})" if cited else "cited none of them"
        out.append(f"The model was shown {_count(n, 'article')} and {what}.")
    reports = answer.budget_reports
    if reports:
        report = reports[default_call(reports)]
        left_out = budget_view(report).left_out
        if left_out:
            out.append(
                f"{_count(len(left_out), 'article')} scored too far below the best one to be worth reading: "
                + "; ".join(left_out)
                + "."
            )
        out.append(budget_sentence(report))
    declined = any(g["name"] == ANSWER_CHECK for g in answer.guards)
    if declined:
        out.append("Before writing, the model judged that these articles do not answer the question.")
    elif answer.answer_check is not None:
        out.append("Before writing, the model checked that these articles answer the question.")
    fired = [plain_reason(g["reason"]) for g in answer.guards if g["name"] != ANSWER_CHECK]
    if fired:
        out.append("Checks changed the answer: " + "; ".join(fired) + ".")
    elif answer.guard_profile:
        out.append("No check had to change the answer.")
    if answer.fallback_reason:
        out.append(f"The configured model could not take it; {printable(answer.model)} answered instead.")
    elif answer.model:
        out.append(f"Written by {printable(answer.model)}.")
    t = answer.timings
    if t.get("total") is not None:
        parts = [f"{t['retrieval']:.1f} s searching" if t.get("retrieval") is not None else ""]
        parts.append(f"{t['llm']:.1f} s with the model" if t.get("llm") is not None else "")
        detail = " and ".join(p for p in parts if p)
        waited = t.get("queue_wait") or 0.0
        queue = f", after {waited:.1f} s waiting for its turn" if waited >= 0.5 else ""
        out.append(f"It took {t['total']:.1f} s{f' ({detail})' if detail else ''}{queue}.")
    return out


def exact_figures(answer: Answer) -> list[tuple[str, str]]:
    """The raw figures behind :func:`plain_summary`, as ``(name, value)`` rows for the engineering view."""
    rows = [("Model", printable(answer.model) or "?"), ("Citations by", answer.citation_method)]
    if answer.answer_check is not None:
        rows.append(("Answer check (log-odds of YES over NO)", f"{answer.answer_check:+.2f}"))
    if answer.not_found_reason:
        rows.append(("Not found because", printable(answer.not_found_reason)))
    if answer.fallback_reason:
        rows.append(("Fallback because", printable(answer.fallback_reason)))
    guards = guard_caption(answer)
    if guards:
        rows.append(("Guards", guards.removeprefix("Guards: ")))
    rows.append(("Searches", printable("; ".join(answer.queries)) or "—"))
    for report_no, report in enumerate(answer.budget_reports, start=1):
        rows.append((f"Budget steps, call {report_no}", " → ".join(report.path) or "—"))
    rows += [(f"Time: {k} (s)", f"{v:.2f}") for k, v in answer.timings.items()]
    return rows
