"""The question log's store, on SQLite and on a real PostgreSQL server: what it writes (redacted, readers hashed
when configured), tenants kept apart, retention, feedback only on one's own questions, and its listings."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ragidx.questions.log import QuestionLog, QuestionNotFound, hash_name
from ragidx.questions.records import FeedbackRecord, Outcome, QuestionRecord, ShownArticle
from ragidx.questions.redaction import Redactor
from ragidx.stores.article_store import ArticleStore

NOW = datetime.now(UTC)


def rec(
    qid: str,
    *,
    reader: str = "user:ann",
    outcome: Outcome = "answered",
    when: datetime | None = None,
    tenant: str | None = None,
    question: str = "How do I print labels?",
) -> QuestionRecord:
    return QuestionRecord(
        id=qid, time=when or NOW, tenant=tenant, reader=reader, groups=("support",), question=question,
        conversation=(("user", "hello, I am ann@example.com"), ("assistant", "Hello.")), outcome=outcome,
        reason=None if outcome == "answered" else "the search found nothing",
        check_score=-1.5 if outcome == "declined" else None,
        articles=(ShownArticle("labels", 1, True), ShownArticle("calc", 2, False)),
        timings={"retrieval": 0.2, "total": 1.5}, model="qwen", guard_profile="small-model", surface="api",
    )  # fmt: skip


def vote(qid: str, v: str = "down", *, reader: str = "user:ann", **kw: str | None) -> FeedbackRecord:
    return FeedbackRecord(qid, datetime.now(UTC), reader, v, kw.get("comment"), kw.get("wrong_article"))  # type: ignore[arg-type]


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "articles.sqlite")
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture()
def store(location: str) -> Iterator[ArticleStore]:
    s = ArticleStore(location)
    yield s
    s.close()


def test_a_record_round_trips_redacted(store: ArticleStore) -> None:
    log = QuestionLog(store, tenant=None, retention_days=30)
    log.record(rec("q1", outcome="declined", question="Card 4111 1111 1111 1111 refused, mail bob@example.com"))
    (got,) = log.records()
    assert got.question == "Card [card] refused, mail [email]"
    assert got.conversation == (("user", "hello, I am [email]"), ("assistant", "Hello."))
    assert (got.outcome, got.check_score, got.reason) == ("declined", -1.5, "the search found nothing")
    assert got.articles == (ShownArticle("labels", 1, True), ShownArticle("calc", 2, False))
    assert dict(got.timings) == {"retrieval": 0.2, "total": 1.5}
    assert (got.reader, got.groups, got.model, got.guard_profile, got.surface) == (
        "user:ann",
        ("support",),
        "qwen",
        "small-model",
        "api",
    )
    assert abs((got.time - NOW).total_seconds()) < 0.01
    log.record(rec("q1", question="a second write of the same id"))  # ignored: the first stays
    assert [r.question for r in log.records()] == ["Card [card] refused, mail [email]"]


def test_tenants_are_kept_apart(store: ArticleStore, location: str) -> None:
    acme = QuestionLog(store, tenant="acme", retention_days=None)
    other_store = ArticleStore(location, tenant="globex")
    globex = QuestionLog(other_store, tenant="globex", retention_days=None)
    acme.record(rec("same-id", tenant="acme", question="acme's question"))
    globex.record(rec("same-id", tenant="globex", question="globex's question"))
    globex.record(rec("g2", tenant="globex"))
    assert [r.question for r in acme.records()] == ["acme's question"]
    assert {r.id for r in globex.records()} == {"same-id", "g2"}
    with pytest.raises(QuestionNotFound):
        acme.feedback(vote("g2"), reader="user:ann")  # the same reader, another tenant's question
    acme.feedback(vote("same-id"), reader="user:ann")
    assert not globex.feedback_for(["same-id"])
    with pytest.raises(ValueError, match="a record of tenant 'globex' given to the log of tenant 'acme'"):
        acme.record(rec("x", tenant="globex"))
    other_store.close()


def test_old_rows_are_purged_on_write_and_never_listed(store: ArticleStore) -> None:
    log = QuestionLog(store, tenant=None, retention_days=7)
    log.record(rec("old", when=NOW - timedelta(days=8)))  # the first write purges (nothing yet); then it is written
    assert not log.records()  # past the retention: never listed, even before it is deleted
    log._purged_at = None  # a purge is due again (at most hourly otherwise)
    log.record(rec("new"))
    raw = store._read("test", lambda c: [r[0] for r in c.exec_driver_sql("SELECT id FROM ragidx_questions")])
    assert raw == ["new"]
    assert [r.id for r in QuestionLog(store, tenant=None, retention_days=None).records()] == ["new"]


def test_feedback_only_on_ones_own_question_and_the_last_vote_counts(store: ArticleStore) -> None:
    log = QuestionLog(store, tenant=None, retention_days=None)
    log.record(rec("ann-q", reader="user:ann"))
    log.record(rec("bob-q", reader="user:bob"))
    log.record(rec("public-q", reader=""))
    with pytest.raises(QuestionNotFound):
        log.feedback(vote("bob-q"), reader="user:ann")
    with pytest.raises(QuestionNotFound):
        log.feedback(vote("no-such-id"), reader="user:ann")
    with pytest.raises(ValueError, match="'pages' is not one of the articles this answer was drawn from"):
        log.feedback(vote("ann-q", wrong_article="pages"), reader="user:ann")
    log.feedback(vote("ann-q", "up"), reader="user:ann")
    log.feedback(vote("ann-q", "down", comment="wrong, call me at +49 30 1234567", wrong_article="calc"),
                 reader="user:ann")  # fmt: skip
    log.feedback(vote("public-q", "up", reader=""), reader="")
    (fb,) = log.feedback_for(["ann-q", "bob-q"])["ann-q"]
    assert (fb.vote, fb.comment, fb.wrong_article) == ("down", "wrong, call me at [phone]", "calc")
    assert fb.reader == "user:ann"
    assert [r.id for r in log.downvoted()] == ["ann-q"]
    assert [f.question_id for f in log.feedback_records()] == ["public-q", "ann-q"]
    log.retract("ann-q", reader="user:ann")
    assert not log.downvoted() and "ann-q" not in log.feedback_for(["ann-q"])


def test_listing_filters_by_time_outcome_and_limit(store: ArticleStore) -> None:
    log = QuestionLog(store, tenant=None, retention_days=None)
    outcomes: list[Outcome] = ["answered", "not_found", "declined", "error", "answered"]
    for i, outcome in enumerate(outcomes):
        log.record(rec(f"q{i}", outcome=outcome, when=NOW - timedelta(hours=i)))
    assert [r.id for r in log.records()] == ["q0", "q1", "q2", "q3", "q4"]  # newest first
    assert [r.id for r in log.records(outcomes=["not_found", "declined"])] == ["q1", "q2"]
    assert [r.id for r in log.records(since=NOW - timedelta(hours=2, minutes=30))] == ["q0", "q1", "q2"]
    assert [r.id for r in log.records(until=NOW - timedelta(hours=2, minutes=30), limit=1)] == ["q3"]
    assert set(log.get(["q1", "nope"])) == {"q1"}


def test_readers_and_groups_stored_as_keyed_hashes(store: ArticleStore) -> None:
    log = QuestionLog(store, tenant=None, retention_days=None, hash_key=b"k1")
    log.record(rec("q1", reader="user:ann"))
    (got,) = log.records()
    assert got.reader == hash_name("user:ann", b"k1") != hash_name("user:ann", b"k2")
    assert got.reader.startswith("h:") and got.groups == (hash_name("support", b"k1"),)
    log.record(QuestionRecord(**{**rec("q2").__dict__, "groups": ("h:looks-hashed",)}))
    assert log.get(["q2"])["q2"].groups[0] not in ("h:looks-hashed", "")  # a group's own name is always hashed
    log.feedback(vote("q1"), reader="user:ann")  # the reader's own question, found by its hash
    with pytest.raises(QuestionNotFound):
        log.feedback(vote("q1"), reader="user:bob")
    raw = store._read("test", lambda c: str(list(c.exec_driver_sql("SELECT * FROM ragidx_questions"))))
    assert "ann" not in raw and "support" not in raw


def test_a_teams_patterns_apply_and_the_reason_loses_what_the_question_hid(tmp_path: Path) -> None:
    store = ArticleStore(tmp_path / "a.sqlite")
    log = QuestionLog(store, tenant=None, retention_days=None, redactor=Redactor([r"CUST-\d+"]))
    r = rec("q1", outcome="not_found", question="order of CUST-0042, I am bob@corp-mail.example")
    log.record(QuestionRecord(**{**r.__dict__, "reason": "no article found mentions corp-mail.example, CUST-0042"}))
    (got,) = log.records()
    assert got.question == "order of [redacted], I am [email]"
    assert got.reason == "no article found mentions [redacted], [redacted]"
    store.close()
    raw = sqlite3.connect(tmp_path / "a.sqlite").execute("SELECT * FROM ragidx_questions").fetchall()
    assert "CUST-0042" not in str(raw) and "corp-mail" not in str(raw)
