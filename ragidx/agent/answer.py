"""The answer object: text, citations, the ranked articles behind it, and what it cost.

Example:
    >>> a = Answer(question="q", text="Use Insert > Table [1].", citations=[Citation(1, "k", "Tables", "u")])
    >>> a.render().splitlines()[-1]
    '[1] Tables — u'
"""

from __future__ import annotations

import textwrap
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ragidx.budget.report import BudgetReport
from ragidx.wording import counted

QUOTE_SHOWN_CHARS = 200
"""A citation's quote is shown up to here in ``Answer.render`` (whole in ``citations``)."""
NOT_FOUND_TEXT = "I could not find the answer to this question in the knowledge base."


@dataclass(frozen=True)
class Progress:
    """What a turn is doing while the user waits (``Engine.stream_ask(..., progress=True)``).

    ``search``: a retrieval ran (``query``, the ``articles`` it found, by title, best first, or ``error``);
    ``prompt``: a prompt of ``tokens`` tokens with ``articles`` goes to the model (``call``: ``plan`` for the
    local model's search plan, ``decide`` when the model chooses whether to search again, ``answer``).

    Example:
        >>> Progress("search", query="page numbers", articles=("Page Numbers", "Footers")).describe()
        'searched "page numbers": 2 articles (Page Numbers; Footers)'
        >>> Progress("prompt", call="answer", tokens=3168, articles=("A", "B")).describe()
        'answering from 2 articles: 3,168 prompt tokens for the model to read'
        >>> Progress("prompt", call="answer", tokens=1500, articles=("A",), expected_s=52.4).describe()
        'answering from 1 article: 1,500 prompt tokens for the model to read (about 52 s)'
    """

    stage: Literal["search", "prompt"]
    query: str = ""
    articles: tuple[str, ...] = ()
    tokens: int = 0
    call: str = ""
    error: str | None = None
    expected_s: float | None = None  # the model's expected time for this prompt, when its speed is known

    def describe(self) -> str:
        """One line for a terminal or a status box (titles, queries and errors escaped: ``safe_text.printable``)."""
        from ragidx.safe_text import printable

        if self.stage == "search":
            query = printable(self.query)
            if self.error:
                return f'searched "{query}": failed ({printable(self.error)})'
            titles = "; ".join(printable(t) for t in self.articles[:5]) + ("; …" if len(self.articles) > 5 else "")
            return f'searched "{query}": {_articles(len(self.articles))}' + (f" ({titles})" if titles else "")
        if self.call == "answer":
            n = _articles(len(self.articles))
            about = f" (about {self.expected_s:.0f} s)" if self.expected_s is not None else ""
            return f"answering from {n}: {self.tokens:,} prompt tokens for the model to read{about}"
        if self.call == "plan":
            return f"planning the searches ({self.tokens:,} prompt tokens)"
        return f"deciding whether to search again ({self.tokens:,} prompt tokens)"


def _articles(n: int) -> str:
    return counted(n, "article")


@dataclass(frozen=True)
class Citation:
    """An article the answer actually cites; ``number`` is the ``[n]`` used in the text."""

    number: int
    kb_id: str
    title: str
    url: str
    where: str = ""
    """The section or page of a document the cited passage is in (``'p. 12, Options'``); '' for a whole
    article; ``url`` then links to that place (``manual.pdf#page=12``)."""
    section: str = ""
    """The title of the document's section that holds the sentence the answer cites ('' for a whole article)."""
    page: int | None = None
    """The PDF page that holds the sentence the answer cites (None for other articles)."""
    quote: str = ""
    """The sentence of the article that supports the statement the citation closes, verbatim ('' when none holds
    enough of its words, or the text shown was not the article's); for a web page ``url`` opens at it and
    highlights it (a URL text fragment, :mod:`ragidx.agent.text_fragments`)."""


@dataclass
class Answer:
    """What ``Engine.ask`` returns.

    Attributes:
        text: the answer, with ``[n]`` markers matching ``citations``.
        citations: the articles cited, in order of first citation.
        articles: all articles the model was shown, deduplicated and ranked (dicts in the tool's JSON shape).
        not_found: the knowledge base had no answer; ``citations`` is then empty.
        not_found_reason: why the model's reply was set aside as not an answer from the articles (it only
            repeated their list, or states values or names none of them writes), or why it was not asked for
            one (the search found nothing; no article shares a word with the question or names what it asks
            about; the answer check judged that the articles shown do not answer, with its log-odds); None when
            the model itself said it found no answer, and for answers.
        answer_check: the answer check's log-odds that the articles shown answer the question (log P(YES) -
            log P(NO) of the model's one-token reply; it asked for the answer when they reached the margin,
            ``[llm] answer_check_margin``); None when no check ran or the server reported no log-probabilities.
        guards: the guards and gates of the answer's guard profile that fired, in order, each
            ``{"name", "reason"}`` (a gate that kept the model from being asked, a reply set aside, a clean-up).
        guard_profile: the resolved guard profile: ``profile`` (``small-model``, ``endpoint``, ``off``), the
            ``guards`` it ran, and those ``enabled`` / ``disabled`` on top of it by overrides.
        citation_method: ``markers`` (the model wrote [n]), ``overlap`` (attributed by shared words
            because the model wrote none), or ``none``.
        queries: every retrieval query run, in order. ``tool_errors``: failures the agent saw.
        budget_reports: one per LLM call, in order. ``model``: the model that wrote the answer;
        ``fallback_reason``: why a larger model was used instead, if it was.
        timings: seconds for retrieval, hook, llm and total. tokens: prompt tokens per call,
            the largest prompt, and completion tokens.
    """

    question: str
    text: str
    citations: list[Citation] = field(default_factory=list)
    articles: list[dict[str, Any]] = field(default_factory=list)
    not_found: bool = False
    citation_method: str = "none"
    queries: list[str] = field(default_factory=list)
    tool_errors: list[str] = field(default_factory=list)
    budget_reports: list[BudgetReport] = field(default_factory=list)
    model: str = ""
    fallback_reason: str | None = None
    session_id: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    tokens: dict[str, Any] = field(default_factory=dict)
    model_text: str = ""  # the model's own reply, before citation clean-up or a not-found verdict
    not_found_reason: str | None = None
    answer_check: float | None = None
    guards: list[dict[str, str]] = field(default_factory=list)
    guard_profile: dict[str, Any] = field(default_factory=dict)
    curated: bool = False  # an editor's curated answer, served without the model (ragidx.questions.curated)
    question_id: str | None = None  # the question log's id of this turn, when it was logged (ragidx.questions)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["budget_reports"] = [r.model_dump(mode="json") for r in self.budget_reports]
        return data

    def render(self) -> str:
        """The answer and its sources (each with the sentence it quotes, cut at ``QUOTE_SHOWN_CHARS``), for a
        terminal: control and bidi characters from the articles' titles,
        ids and URLs (or echoed into the text) are shown as escapes (:func:`ragidx.safe_text.printable`); an id
        shown for a missing URL is cut back where it reads as an instruction, as a citation's URL is
        (:func:`ragidx.safety.injection.shown_url`)."""
        from ragidx.safe_text import printable
        from ragidx.safety.injection import shown_url

        lines = [printable(self.text.strip(), keep_newlines=True)]
        if self.citations:
            lines.append("")
            lines.append("Sources:")
            for c in self.citations:
                lines.append(
                    f"[{c.number}] {printable(c.title)}{f' ({printable(c.where)})' if c.where else ''} — "
                    f"{printable(c.url or shown_url(c.kb_id))}"
                )
                if c.quote:  # the sentence the citation rests on, for the reader to check at a glance
                    lines.append(f'    "{printable(textwrap.shorten(c.quote, QUOTE_SHOWN_CHARS, placeholder=" …"))}"')
        return "\n".join(lines)
