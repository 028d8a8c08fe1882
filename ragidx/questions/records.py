"""The typed records of the question log: one per answered turn, one per reader's vote on it.

Usage:
    >>> from datetime import UTC, datetime
    >>> rec = QuestionRecord(id="chatcmpl-1", time=datetime.now(UTC), tenant=None, reader="user:ann", groups=(),
    ...     question="How do I reset my password?", conversation=(), outcome="answered", reason=None,
    ...     check_score=0.9, articles=(ShownArticle("kb-1", 1, True),), timings={"total": 1.2}, model="m",
    ...     guard_profile="default", surface="api")
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

Outcome = Literal["answered", "not_found", "declined", "error", "curated"]
Vote = Literal["up", "down"]


@dataclass(frozen=True)
class ShownArticle:
    """An article the model was shown for a question.

    Attributes:
        kb_id: The article's id in its knowledge base.
        rank: Its article_rank shown to the model (1 = best).
        cited: Whether the answer cited it.
    """

    kb_id: str
    rank: int
    cited: bool


@dataclass(frozen=True)
class QuestionRecord:
    """One turn of a reader's conversation as the log keeps it.

    Attributes:
        id: The turn's id: the chat completion id over HTTP ("chatcmpl-..."), a uuid elsewhere.
        time: When it was asked (UTC).
        tenant: The tenant whose store it belongs to; None for a single-tenant store.
        reader: "user:NAME" (or a keyed hash "h:..." when configured); "" for an anonymous or public reader.
        groups: The reader's groups (hashed likewise when configured).
        question: The question, redacted before it is stored.
        conversation: Earlier (role, text) turns, redacted.
        outcome: answered, not_found, declined, error or curated.
        reason: For not_found and declined: why (the guard's name, "answer check 0.31 < 0.45", ...).
        check_score: The answer check's score, when it ran.
        articles: The articles shown to the model, with their ranks and whether they were cited.
        timings: Seconds by stage ("retrieval", "llm", "total", ...).
        model: The model that answered.
        guard_profile: The guard profile in force.
        surface: Where it was asked: "serve", "dashboard", "api", "cli" or "mcp".
    """

    id: str
    time: datetime
    tenant: str | None
    reader: str
    groups: tuple[str, ...]
    question: str
    conversation: tuple[tuple[str, str], ...]
    outcome: Outcome
    reason: str | None
    check_score: float | None
    articles: tuple[ShownArticle, ...]
    timings: Mapping[str, float]
    model: str
    guard_profile: str
    surface: str


@dataclass(frozen=True)
class FeedbackRecord:
    """A reader's vote on one of their answers.

    Attributes:
        question_id: The QuestionRecord.id voted on (the chat completion id over HTTP).
        time: When the vote was cast (UTC).
        reader: The reader who voted, in the same form as QuestionRecord.reader.
        vote: "up" or "down".
        comment: The reader's comment, redacted.
        wrong_article: The kb_id the reader says was wrong.
    """

    question_id: str
    time: datetime
    reader: str
    vote: Vote
    comment: str | None
    wrong_article: str | None
