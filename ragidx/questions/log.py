"""The question log: every logged turn and its reader's vote, in two tables of the article store's database.

The tables live beside the articles (SQLite or PostgreSQL, whichever the :class:`ArticleStore` points at), and
every statement goes through the store's own connection handling: on SQLite one writer at a time, on PostgreSQL
a step whose connection drops is run again. Rows are keyed by tenant, so one tenant's log never shows another's.

What reaches the database is decided here and nowhere else:

- the question, the conversation, the reason and a feedback comment are redacted
  (:class:`~ragidx.questions.redaction.Redactor`) before they are written; what the question's redaction hid is
  also removed from the reason, which may quote the question's words;
- with a ``hash_key``, each reader (``user:NAME``) and group is stored as ``h:`` and a keyed HMAC-SHA256 of it,
  and a reader's feedback is matched by the same hash, so a reader may rate their own answers without the log
  naming anyone;
- with ``retention_days``, rows older than that are deleted as new ones are written (at most once an hour per
  process, and on the first write) and never listed.

Example:
    >>> from datetime import UTC, datetime
    >>> from ragidx.questions.records import QuestionRecord
    >>> from ragidx.stores.article_store import ArticleStore
    >>> log = QuestionLog(ArticleStore(":memory:"), tenant=None, retention_days=30)
    >>> log.record(QuestionRecord("q1", datetime.now(UTC), None, "user:ann", (), "mail ann@example.com", (),
    ...     "not_found", "no article shares a word", None, (), {}, "m", "small-model", "api"))
    >>> log.records()[0].question
    'mail [email]'
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from sqlalchemy import (
    Column,
    Connection,
    Float,
    Index,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    delete,
    select,
    text,
)
from sqlalchemy.dialects import postgresql, sqlite

from ragidx.questions.records import FeedbackRecord, Outcome, QuestionRecord, ShownArticle, Vote
from ragidx.questions.redaction import Redactor
from ragidx.stores.article_store import ArticleStore

__all__ = ["QuestionLog", "QuestionNotFound", "hash_name"]

logger = logging.getLogger(__name__)

QUESTIONS_TABLE = "ragidx_questions"
FEEDBACK_TABLE = "ragidx_question_feedback"
PURGE_EVERY_S = 3600.0
"""How often (at most) a process deletes rows past the retention, on a write."""
OUTCOMES: tuple[Outcome, ...] = ("answered", "not_found", "declined", "error", "curated")
VOTES: tuple[Vote, ...] = ("up", "down")
T = TypeVar("T")


class QuestionNotFound(LookupError):
    """No logged question has this id for this reader (it was never logged, was deleted, or someone else asked)."""


def hash_name(name: str, key: bytes | None) -> str:
    """``name`` as the log stores it: itself without a key; ``h:`` and 24 hex digits of HMAC-SHA256 with one.
    Already-hashed names and the public reader ('') are kept as they are, so hashing twice changes nothing.

    Example:
        >>> hash_name("user:ann", b"secret")
        'h:bcc27936b89b5b84883dc8a5'
    """
    if key is None or not name or name.startswith("h:"):
        return name
    return _keyed(name, key)


def _keyed(name: str, key: bytes) -> str:
    return "h:" + hmac.new(key, name.encode(), hashlib.sha256).hexdigest()[:24]


def _tables(metadata: MetaData) -> tuple[Table, Table]:
    questions = Table(
        QUESTIONS_TABLE,
        metadata,
        Column("tenant", Text, nullable=False),
        Column("id", Text, nullable=False),
        Column("time", Float, nullable=False),
        Column("reader", Text, nullable=False),
        Column("groups_json", Text, nullable=False),
        Column("question", Text, nullable=False),
        Column("conversation_json", Text, nullable=False),
        Column("outcome", Text, nullable=False),
        Column("reason", Text),
        Column("check_score", Float),
        Column("articles_json", Text, nullable=False),
        Column("timings_json", Text, nullable=False),
        Column("model", Text, nullable=False),
        Column("guard_profile", Text, nullable=False),
        Column("surface", Text, nullable=False),
        PrimaryKeyConstraint("tenant", "id", name=f"{QUESTIONS_TABLE}_pkey"),
        Index(f"{QUESTIONS_TABLE}_tenant_time", "tenant", "time"),
    )
    feedback = Table(
        FEEDBACK_TABLE,
        metadata,
        Column("tenant", Text, nullable=False),
        Column("question_id", Text, nullable=False),
        Column("time", Float, nullable=False),
        Column("reader", Text, nullable=False),
        Column("vote", Text, nullable=False),
        Column("comment", Text),
        Column("wrong_article", Text),
        PrimaryKeyConstraint("tenant", "question_id", name=f"{FEEDBACK_TABLE}_pkey"),
        Index(f"{FEEDBACK_TABLE}_tenant_time", "tenant", "time"),
    )
    return questions, feedback


class QuestionLog:
    """Logged questions and feedback of one tenant, in the article store's database. Thread-safe.

    Args:
        article_store: the store whose database holds the log (its connection and retries are used).
        tenant: the tenant whose rows this log reads and writes; None for none.
        retention_days: days rows are kept; None keeps them.
        redactor: what removes personal data before a row is written (default: the built-in rules).
        hash_key: with a key, readers and groups are stored as keyed hashes (:func:`hash_name`).

    Example:
        >>> from ragidx.stores.article_store import ArticleStore
        >>> QuestionLog(ArticleStore(":memory:"), tenant="acme", retention_days=None).records()
        []
    """

    def __init__(
        self,
        article_store: ArticleStore,
        *,
        tenant: str | None,
        retention_days: int | None,
        redactor: Redactor | None = None,
        hash_key: bytes | None = None,
    ) -> None:
        if retention_days is not None and retention_days < 1:
            raise ValueError(f"retention_days is {retention_days}: give at least 1, or None to keep rows")
        self.store = article_store
        self.tenant = tenant or None
        self.retention_days = retention_days
        self.redactor = redactor or Redactor()
        self._key = hash_key
        self._tenant_value = self.tenant or ""
        self.questions, self.feedback_table = _tables(MetaData())
        self._lock = threading.Lock()
        self._ready = False
        self._purged_at: float | None = None

    # --- writing ----------------------------------------------------------------------------------
    def record(self, rec: QuestionRecord) -> None:
        """Write one turn (redacted, its reader hashed when configured). A second record with the same id is
        ignored: the first stays.

        Raises:
            ValueError: the record is of another tenant, or its outcome is none of ``OUTCOMES``.
        """
        if (rec.tenant or None) != self.tenant:
            raise ValueError(f"a record of tenant {rec.tenant!r} given to the log of tenant {self.tenant!r}")
        if rec.outcome not in OUTCOMES:
            raise ValueError(f"outcome {rec.outcome!r}: use one of {', '.join(OUTCOMES)}")
        redact = self.redactor
        hidden = [h for text in (rec.question, *(t for _, t in rec.conversation)) for h in redact.hidden(text)]
        row = {
            "tenant": self._tenant_value,
            "id": rec.id,
            "time": _epoch(rec.time),
            "reader": self.reader_name(rec.reader),
            "groups_json": json.dumps([g if self._key is None else _keyed(g, self._key) for g in rec.groups]),
            "question": redact.redact(rec.question),
            "conversation_json": json.dumps([[role, redact.redact(t)] for role, t in rec.conversation]),
            "outcome": rec.outcome,
            "reason": None if rec.reason is None else redact.redact(rec.reason, hiding=hidden),
            "check_score": rec.check_score,
            "articles_json": json.dumps([[a.kb_id, a.rank, a.cited] for a in rec.articles]),
            "timings_json": json.dumps({k: float(v) for k, v in rec.timings.items()}),
            "model": rec.model,
            "guard_profile": rec.guard_profile,
            "surface": rec.surface,
        }
        q = self.questions

        def run(conn: Connection) -> None:
            stmt: Any = (postgresql.insert if self.store.is_postgres else sqlite.insert)(q).values(row)
            conn.execute(stmt.on_conflict_do_nothing(index_elements=[q.c.tenant, q.c.id]))

        self._write("logging a question", run)
        self._purge_if_due()

    def feedback(self, fb: FeedbackRecord, *, reader: str) -> None:
        """Store ``reader``'s vote on a question they asked (a later vote replaces it); the comment is redacted.

        Raises:
            QuestionNotFound: ``reader`` asked no logged question ``fb.question_id`` (never logged, past the
                retention, or asked by someone else: the three read alike, so nothing is told of others).
            ValueError: the vote is neither ``"up"`` nor ``"down"``, or ``wrong_article`` is not among the articles
                the answer was drawn from.
        """
        if fb.vote not in VOTES:
            raise ValueError(f"vote {fb.vote!r}: give 'up' or 'down'")
        name = self.reader_name(reader)
        f = self.feedback_table
        row = {
            "tenant": self._tenant_value,
            "question_id": fb.question_id,
            "time": _epoch(fb.time),
            "reader": name,
            "vote": fb.vote,
            "comment": None if fb.comment is None else self.redactor.redact(fb.comment),
            "wrong_article": fb.wrong_article,
        }

        def run(conn: Connection) -> None:
            shown = self._shown(conn, fb.question_id, name)
            if shown is None:
                raise QuestionNotFound(f"no logged question {fb.question_id!r} of this reader")
            if fb.wrong_article is not None and fb.wrong_article not in shown:
                raise ValueError(
                    f"wrong_article {fb.wrong_article!r} is not one of the articles this answer was drawn from; "
                    "name one of its sources"
                )
            stmt: Any = (postgresql.insert if self.store.is_postgres else sqlite.insert)(f).values(row)
            updated = {k: stmt.excluded[k] for k in ("time", "reader", "vote", "comment", "wrong_article")}
            conn.execute(stmt.on_conflict_do_update(index_elements=[f.c.tenant, f.c.question_id], set_=updated))

        self._write("recording feedback", run)

    def retract(self, question_id: str, *, reader: str) -> None:
        """Take back ``reader``'s vote on their question ``question_id`` (nothing happens when there is none).

        Raises:
            QuestionNotFound: as for :meth:`feedback`.
        """
        name = self.reader_name(reader)
        f = self.feedback_table

        def run(conn: Connection) -> None:
            if self._shown(conn, question_id, name) is None:
                raise QuestionNotFound(f"no logged question {question_id!r} of this reader")
            conn.execute(delete(f).where(f.c.tenant == self._tenant_value, f.c.question_id == question_id))

        self._write("taking feedback back", run)

    def purge(self) -> int:
        """Delete the questions (and their feedback) past the retention now; returns how many questions went."""
        if self.retention_days is None:
            return 0
        cutoff = self._cutoff()
        q, f = self.questions, self.feedback_table

        def run(conn: Connection) -> int:
            old = select(q.c.id).where(q.c.tenant == self._tenant_value, q.c.time < cutoff)
            conn.execute(delete(f).where(f.c.tenant == self._tenant_value, f.c.question_id.in_(old)))
            return int(conn.execute(delete(q).where(q.c.tenant == self._tenant_value, q.c.time < cutoff)).rowcount)

        gone = self._write("deleting questions past the retention", run)
        if gone:
            logger.info("question log: deleted %d questions older than %d days", gone, self.retention_days)
        return gone

    # --- reading ----------------------------------------------------------------------------------
    def records(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        outcomes: Collection[Outcome] | None = None,
        limit: int | None = None,
    ) -> list[QuestionRecord]:
        """This tenant's logged questions asked from ``since`` (inclusive) to ``until`` (exclusive), newest first,
        of the given outcomes, at most ``limit`` of them; never any past the retention."""
        q = self.questions
        stmt = select(q).where(*self._window(q, since, until))
        if outcomes is not None:
            stmt = stmt.where(q.c.outcome.in_(list(outcomes)))
        stmt = stmt.order_by(q.c.time.desc(), q.c.id)
        if limit is not None:
            stmt = stmt.limit(limit)
        rows = self._rows("reading the question log", stmt)
        return [self._question(r) for r in rows]

    def get(self, question_ids: Sequence[str]) -> dict[str, QuestionRecord]:
        """The logged questions of these ids (id → record; ids not logged, or past the retention, are absent)."""
        q = self.questions
        out: dict[str, QuestionRecord] = {}
        for batch in _batches(question_ids):
            stmt = select(q).where(*self._window(q, None, None), q.c.id.in_(batch))
            rows = self._rows("reading the question log", stmt)
            out.update({r["id"]: self._question(r) for r in rows})
        return out

    def feedback_for(self, question_ids: Sequence[str]) -> dict[str, list[FeedbackRecord]]:
        """question id → the feedback on it (a reader's latest vote; ids without feedback are absent)."""
        f = self.feedback_table
        out: dict[str, list[FeedbackRecord]] = {}
        for batch in _batches(question_ids):
            stmt = select(f).where(*self._window(f, None, None), f.c.question_id.in_(batch))
            for r in self._rows("reading feedback", stmt):
                out.setdefault(r["question_id"], []).append(_feedback(r))
        return out

    def feedback_records(
        self, *, since: datetime | None = None, until: datetime | None = None, limit: int | None = None
    ) -> list[FeedbackRecord]:
        """This tenant's feedback given from ``since`` to ``until``, newest first, at most ``limit``."""
        f = self.feedback_table
        stmt = select(f).where(*self._window(f, since, until)).order_by(f.c.time.desc(), f.c.question_id)
        if limit is not None:
            stmt = stmt.limit(limit)
        rows = self._rows("reading feedback", stmt)
        return [_feedback(r) for r in rows]

    def downvoted(self, *, since: datetime | None = None, until: datetime | None = None) -> list[QuestionRecord]:
        """The questions asked from ``since`` to ``until`` whose reader voted them down, newest first."""
        q, f = self.questions, self.feedback_table
        down = select(f.c.question_id).where(f.c.tenant == self._tenant_value, f.c.vote == "down")
        stmt = select(q).where(*self._window(q, since, until), q.c.id.in_(down)).order_by(q.c.time.desc(), q.c.id)
        rows = self._rows("reading the question log", stmt)
        return [self._question(r) for r in rows]

    def reader_name(self, reader: str) -> str:
        """``reader`` as this log stores it (hashed when it has a key)."""
        return hash_name(reader, self._key)

    # --- inside -----------------------------------------------------------------------------------
    def _shown(self, conn: Connection, question_id: str, reader: str) -> set[str] | None:
        """The kb_ids shown with ``reader``'s question ``question_id``; None when they asked no such question."""
        q = self.questions
        found = conn.execute(
            select(q.c.articles_json).where(*self._window(q, None, None), q.c.id == question_id, q.c.reader == reader)
        ).first()
        return None if found is None else {kb_id for kb_id, _, _ in json.loads(found[0])}

    def _window(self, table: Table, since: datetime | None, until: datetime | None) -> list[Any]:
        where = [table.c.tenant == self._tenant_value]
        if self.retention_days is not None:
            where.append(table.c.time >= self._cutoff())
        if since is not None:
            where.append(table.c.time >= _epoch(since))
        if until is not None:
            where.append(table.c.time < _epoch(until))
        return where

    def _cutoff(self) -> float:
        return time.time() - 86400.0 * (self.retention_days or 0)

    def _purge_if_due(self) -> None:
        if self.retention_days is None:
            return
        now = time.monotonic()
        with self._lock:
            if self._purged_at is not None and now - self._purged_at < PURGE_EVERY_S:
                return
            self._purged_at = now
        self.purge()

    def _question(self, row: Any) -> QuestionRecord:
        return QuestionRecord(
            id=row["id"],
            time=datetime.fromtimestamp(row["time"], UTC),
            tenant=self.tenant,
            reader=row["reader"],
            groups=tuple(json.loads(row["groups_json"])),
            question=row["question"],
            conversation=tuple((role, t) for role, t in json.loads(row["conversation_json"])),
            outcome=cast(Outcome, row["outcome"]),
            reason=row["reason"],
            check_score=row["check_score"],
            articles=tuple(ShownArticle(k, int(n), bool(c)) for k, n, c in json.loads(row["articles_json"])),
            timings=json.loads(row["timings_json"]),
            model=row["model"],
            guard_profile=row["guard_profile"],
            surface=row["surface"],
        )

    def _ensure(self) -> None:
        with self._lock:
            if self._ready:
                return
        q = self.questions

        def run(conn: Connection) -> None:
            if self.store.is_postgres:  # CREATE TABLE IF NOT EXISTS races between two processes
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _lock_key(QUESTIONS_TABLE)})
            q.metadata.create_all(conn, checkfirst=True)

        self.store._write("creating the question log", run)
        with self._lock:
            self._ready = True

    def _write(self, step: str, fn: Callable[[Connection], T]) -> T:
        self._ensure()
        return self.store._write(step, fn)

    def _rows(self, step: str, stmt: Any) -> list[Any]:
        self._ensure()
        return self.store._read(step, lambda conn: list(conn.execute(stmt).mappings()))


def _feedback(row: Any) -> FeedbackRecord:
    return FeedbackRecord(
        question_id=row["question_id"],
        time=datetime.fromtimestamp(row["time"], UTC),
        reader=row["reader"],
        vote=cast(Vote, row["vote"]),
        comment=row["comment"],
        wrong_article=row["wrong_article"],
    )


def _epoch(when: datetime) -> float:
    """Seconds since the epoch; a time without a zone is taken as UTC."""
    return (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).timestamp()


def _batches(items: Iterable[str], size: int = 500) -> Iterable[list[str]]:
    batch: list[str] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _lock_key(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
