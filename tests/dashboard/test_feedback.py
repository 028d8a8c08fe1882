"""The dashboard's turns and thumbs go to the question log: a turn logged as the public reader on the dashboard
surface, a rating stored on its id (and taken back), an error logged as one; a log that is off, or an id it
does not hold, is said to the reader instead of failing the page."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ragidx.agent.answer import Answer, Citation
from ragidx.config import Settings
from ragidx.dashboard.feedback import rate, record_turn
from ragidx.engine import Engine
from ragidx.questions.recorder import recorder_for
from tests.dashboard.fakes import make_engine


@pytest.fixture()
def engine(tmp_path: Path) -> Iterator[Engine]:
    with make_engine(Settings(data_dir=tmp_path / "data")) as eng:
        yield eng


def test_a_turn_is_logged_and_its_rating_stored_then_taken_back(engine: Engine) -> None:
    answer = Answer(
        question="How do I number pages?",
        text="Use Insert > Field > Page Number [1].",
        citations=[Citation(1, "pages", "Page Numbers", "https://kb/pages")],
        articles=[{"kb_id": "pages"}, {"kb_id": "footers"}],
        model="qwen2.5-1.5b",
    )
    record_turn(engine, "How do I number pages? I'm on +33 6 12 34 56 78", answer, turn_id="t1")
    log = recorder_for(engine).log
    assert log is not None
    (record,) = log.records()
    assert (record.id, record.surface, record.reader, record.outcome) == ("t1", "dashboard", "", "answered")
    assert record.question == "How do I number pages? I'm on [phone]"
    assert [(a.kb_id, a.rank, a.cited) for a in record.articles] == [("pages", 1, True), ("footers", 2, False)]
    assert rate(engine, "t1", "down").startswith("Thank you: this answer is marked as wrong")
    assert [f.vote for f in log.feedback_for(["t1"])["t1"]] == ["down"]
    assert rate(engine, "t1", None) == "Your rating is taken back."
    assert not log.feedback_for(["t1"])
    assert rate(engine, "not-logged", "up").startswith("This answer is no longer in the question log")


def test_an_error_is_logged_as_one(engine: Engine) -> None:
    record_turn(engine, "Why?", None, turn_id="t2", error=TimeoutError("the model took too long"))
    log = recorder_for(engine).log
    assert log is not None
    (record,) = log.records()
    assert (record.outcome, record.reason) == ("error", "TimeoutError: the model took too long")


def test_with_the_log_off_nothing_is_logged_and_the_thumbs_say_so(tmp_path: Path) -> None:
    with make_engine(Settings(data_dir=tmp_path / "data", questions={"enabled": False})) as engine:
        record_turn(engine, "How do I number pages?", Answer(question="q", text="t"), turn_id="t1")
        assert recorder_for(engine).log is None
        assert rate(engine, "t1", "down") == "Ratings are not kept here: the question log is off."
