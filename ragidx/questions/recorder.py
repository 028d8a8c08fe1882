"""From an answered turn to the question log: what each surface (``ragidx serve``, the dashboard, the Python API)
calls after a question, and for feedback.

:func:`recorder_for` gives an engine's :class:`QuestionRecorder` (one per engine, made on first use from
``[questions]`` and the engine's article store and tenant). Its :meth:`~QuestionRecorder.record` turns an
:class:`~ragidx.agent.answer.Answer` (or the error that ended the turn) into a
:class:`~ragidx.questions.records.QuestionRecord` and writes it; a log that cannot be written never fails the
answer: the first failure is logged as a warning, later ones (until a write succeeds again) at debug level.

Outcomes, read from the answer:

- ``answered``: the answer is one (``not_found`` false);
- ``declined``: the answer check judged the articles shown do not answer (its gate fired): ``check_score`` is its
  log-odds, ``reason`` its words;
- ``not_found``: any other turn without an answer (the search found nothing, a gate or the model said so), with
  the reason the answer gives;
- ``error``: the turn raised; ``reason`` is the error's kind and first line.

Example:
    >>> from ragidx.agent.answer import Answer
    >>> outcome_of(Answer(question="q", text="-", not_found=True, not_found_reason="the search found nothing"))
    ('not_found', 'the search found nothing')
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
import weakref
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ragidx.questions.log import QuestionLog
from ragidx.questions.records import FeedbackRecord, Outcome, QuestionRecord, ShownArticle, Vote
from ragidx.questions.redaction import Redactor
from ragidx.stores.access import PUBLIC_PRINCIPAL, Principal

if TYPE_CHECKING:
    from llama_index.core.base.llms.types import ChatMessage

    from ragidx.agent.answer import Answer
    from ragidx.config import Settings
    from ragidx.stores.article_store import ArticleStore

__all__ = [
    "QuestionLogOff",
    "QuestionRecorder",
    "Turn",
    "log_for",
    "outcome_of",
    "record_of",
    "recorder_for",
]

logger = logging.getLogger(__name__)

ANSWER_CHECK = "answer_check"  # the gate's name (ragidx.agent.guards.gates.ANSWER_CHECK)


class QuestionLogOff(RuntimeError):
    """The question log is switched off (``questions.enabled = false``): nothing is logged or rated."""


def outcome_of(answer: Answer) -> tuple[Outcome, str | None]:
    """The answer's outcome and, for a turn without an answer, why (see the module's docstring)."""
    if getattr(answer, "curated", False):  # an editor's pinned answer (ragidx.questions.curated)
        return "curated", None
    if not answer.not_found:
        return "answered", None
    for guard in reversed(answer.guards):
        if guard.get("name") == ANSWER_CHECK:
            return "declined", guard.get("reason") or answer.not_found_reason
    fired = next((g.get("reason") for g in reversed(answer.guards) if g.get("reason")), None)
    return "not_found", answer.not_found_reason or fired or "the model found no answer in the articles shown"


def shown_articles(answer: Answer) -> tuple[ShownArticle, ...]:
    """The articles the model was shown, with the rank it saw (``article_rank``; else their order) and whether
    the answer cites them."""
    cited = {c.kb_id for c in answer.citations}
    shown = []
    for i, article in enumerate(answer.articles, start=1):
        kb_id = str(article.get("kb_id") or "")
        rank = (article.get("metadata") or {}).get("article_rank") or article.get("article_rank") or i
        shown.append(ShownArticle(kb_id, int(rank), kb_id in cited))
    return tuple(shown)


def record_of(
    answer: Answer | None,
    *,
    id: str,
    question: str,
    reader: Principal = PUBLIC_PRINCIPAL,
    history: Sequence[ChatMessage] | Sequence[tuple[str, str]] = (),
    surface: str,
    tenant: str | None,
    model: str = "",
    guard_profile: str = "",
    error: BaseException | None = None,
    time: datetime | None = None,
) -> QuestionRecord:
    """The record of one turn: its ``answer``, or the ``error`` it ended in (``answer`` None). Not yet redacted
    or hashed: :class:`~ragidx.questions.log.QuestionLog` does both as it writes."""
    if answer is None:
        first = str(error).strip().splitlines()[0][:200] if error is not None and str(error).strip() else ""
        outcome: Outcome = "error"
        reason: str | None = f"{type(error).__name__}: {first}" if first else type(error).__name__
    else:
        outcome, reason = outcome_of(answer)
    profile = str((answer.guard_profile or {}).get("profile") or "") if answer is not None else ""
    return QuestionRecord(
        id=id,
        time=time or datetime.now(UTC),
        tenant=tenant,
        reader=f"user:{reader.user}" if reader.user else "",
        groups=tuple(reader.groups),
        question=question,
        conversation=tuple(_turns(history)),
        outcome=outcome,
        reason=reason,
        check_score=answer.answer_check if answer is not None else None,
        articles=shown_articles(answer) if answer is not None else (),
        timings=dict(answer.timings) if answer is not None else {},
        model=(answer.model if answer is not None else "") or model,
        guard_profile=profile or guard_profile,
        surface=surface,
    )


def _turns(history: Sequence[Any]) -> list[tuple[str, str]]:
    out = []
    for message in history:
        if isinstance(message, tuple):
            role, content = message
        else:
            role = getattr(message.role, "value", message.role)
            content = message.content
        out.append((str(role), str(content or "")))
    return out


def log_for(settings: Settings, article_store: ArticleStore) -> QuestionLog | None:
    """The question log these settings ask for, in ``article_store``'s database (None when it is off)."""
    cfg = settings.questions
    if not cfg.enabled:
        return None
    key = cfg.hash_key.get_secret_value().encode() if cfg.hash_readers and cfg.hash_key is not None else None
    return QuestionLog(
        article_store,
        tenant=settings.tenant,
        retention_days=cfg.retention_days,
        redactor=Redactor(cfg.redact_patterns),
        hash_key=key,
    )


@dataclass
class QuestionRecorder:
    """Writes turns and feedback to a question log, never failing the answer (see the module's docstring).

    Args:
        log: the log; None when the log is off (nothing is recorded; feedback raises :class:`QuestionLogOff`).
        tenant: the tenant records belong to (the log's).
        model, guard_profile: what a record names when its answer does not (an error).

    Example:
        >>> from ragidx.agent.answer import Answer
        >>> from ragidx.stores.article_store import ArticleStore
        >>> rec = QuestionRecorder(QuestionLog(ArticleStore(":memory:"), tenant=None, retention_days=None))
        >>> qid = rec.record(Answer(question="q", text="t"), question="Call +1 415 555 2671?", surface="api")
        >>> rec.log.get([qid])[qid].question
        'Call [phone]?'
    """

    log: QuestionLog | None
    tenant: str | None = None
    model: str = ""
    guard_profile: str = ""
    _failing: bool = field(default=False, init=False, repr=False)

    @property
    def enabled(self) -> bool:
        return self.log is not None

    def record(
        self,
        answer: Answer | None,
        *,
        question: str,
        surface: str,
        reader: Principal = PUBLIC_PRINCIPAL,
        history: Sequence[ChatMessage] | Sequence[tuple[str, str]] = (),
        id: str | None = None,
        error: BaseException | None = None,
        time: datetime | None = None,
    ) -> str | None:
        """Log one turn; returns its id (``id``, else a new uuid), or None when the log is off or the write
        failed (the failure is logged, never raised)."""
        if self.log is None:
            return None
        qid = id or uuid.uuid4().hex
        try:
            rec = record_of(
                answer, id=qid, question=question, reader=reader, history=history, surface=surface,
                tenant=self.tenant, model=self.model, guard_profile=self.guard_profile, error=error, time=time,
            )  # fmt: skip
            self.log.record(rec)
        except Exception as exc:
            self._failed(exc)
            return None
        self._failing = False
        return qid

    async def arecord(self, answer: Answer | None, **kwargs: Any) -> str | None:
        """:meth:`record` on a worker thread (the write is a database transaction)."""
        if self.log is None:
            return None
        return await asyncio.to_thread(lambda: self.record(answer, **kwargs))

    async def logged(
        self,
        asked: Awaitable[Answer],
        question: str,
        *,
        user: str | None = None,
        groups: Iterable[str] | None = None,
        history: Sequence[ChatMessage] | None = None,
        surface: str = "api",
    ) -> Answer:
        """``asked``'s answer, its turn logged (``Engine.ask(..., log=True)``): the answer comes back with
        ``question_id`` set when it was logged. A turn that raises is logged as an error and raises on."""
        turn = self.turn(question, surface=surface, reader=Principal.of(user, groups), history=history or ())
        try:
            answer = await asked
        except Exception as exc:
            await turn.failed(exc)
            raise
        qid = await turn.answered(answer)
        return replace(answer, question_id=qid) if qid is not None else answer

    def turn(
        self,
        question: str,
        *,
        surface: str,
        reader: Principal = PUBLIC_PRINCIPAL,
        history: Sequence[ChatMessage] | Sequence[tuple[str, str]] = (),
        id: str | None = None,
    ) -> Turn:
        """A turn about to be answered: its id and time are fixed now, its outcome recorded when it ends."""
        return Turn(self, id or uuid.uuid4().hex, question, surface, reader, tuple(history), datetime.now(UTC))

    def feedback(
        self,
        question_id: str,
        vote: Vote | None,
        *,
        reader: Principal = PUBLIC_PRINCIPAL,
        comment: str | None = None,
        wrong_article: str | None = None,
    ) -> FeedbackRecord | None:
        """Store ``reader``'s ``vote`` on their question ``question_id`` (a later vote replaces it; None takes it
        back and returns None).

        Raises:
            QuestionLogOff: the log is off.
            QuestionNotFound: ``reader`` asked no logged question of that id.
            ValueError: the vote is neither ``"up"``, ``"down"`` nor None.
        """
        if self.log is None:
            raise QuestionLogOff("the question log is off (questions.enabled = false): feedback is not recorded")
        name = f"user:{reader.user}" if reader.user else ""
        if vote is None:
            self.log.retract(question_id, reader=name)
            return None
        fb = FeedbackRecord(question_id, datetime.now(UTC), name, vote, comment, wrong_article)
        self.log.feedback(fb, reader=name)
        return fb

    def _failed(self, exc: Exception) -> None:
        if self._failing:
            logger.debug("the question log could not record a question: %s", exc)
            return
        self._failing = True
        logger.warning(
            "the question log could not record a question (%s: %s); answers go on unlogged until it can",
            type(exc).__name__,
            exc,
        )


@dataclass(frozen=True)
class Turn:
    """One question on its way: ``id`` names it (over HTTP: the chat completion id the client gets back)."""

    recorder: QuestionRecorder
    id: str
    question: str
    surface: str
    reader: Principal
    history: tuple[Any, ...]
    time: datetime

    async def answered(self, answer: Answer) -> str | None:
        """Record the turn's answer (before the client sees the id, so feedback on it finds it)."""
        return await self.recorder.arecord(answer, **self._fields())

    async def failed(self, error: BaseException) -> str | None:
        """Record the turn as an error."""
        return await self.recorder.arecord(None, error=error, **self._fields())

    def _fields(self) -> dict[str, Any]:
        return {
            "question": self.question, "surface": self.surface, "reader": self.reader, "history": self.history,
            "id": self.id, "time": self.time,
        }  # fmt: skip


_RECORDERS: weakref.WeakKeyDictionary[Any, QuestionRecorder] = weakref.WeakKeyDictionary()
_RECORDERS_LOCK = threading.Lock()


def recorder_for(engine: Any) -> QuestionRecorder:
    """The engine's recorder (made once per engine from its settings, article store and tenant). An engine whose
    log cannot be opened gets a recorder that records nothing, with a warning: questions are still answered."""
    with _RECORDERS_LOCK:
        found = _RECORDERS.get(engine)
        if found is not None:
            return found
        try:
            settings = engine.settings
            log = log_for(settings, engine.article_store)
            recorder = QuestionRecorder(
                log, tenant=settings.tenant, model=settings.llm.model, guard_profile=str(settings.llm.guards)
            )
        except Exception as exc:
            logger.warning("the question log is unavailable (%s: %s); questions are answered unlogged",
                           type(exc).__name__, exc)  # fmt: skip
            recorder = QuestionRecorder(None)
        _RECORDERS[engine] = recorder
        return recorder
