"""From a turn to a record: outcomes read from the answer (answered, not_found with its reason, declined by the
answer check with its score, error, curated), the articles shown with their ranks and citations; the Python API
(``Engine.ask(..., log=True)``, ``Engine.feedback``); and a log that cannot be written never failing an answer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from llama_index.core.base.llms.types import ChatMessage

from ragidx.agent.answer import Answer, Citation
from ragidx.article import Article
from ragidx.config import Settings
from ragidx.engine import Engine
from ragidx.questions.log import QuestionLog, QuestionNotFound
from ragidx.questions.recorder import QuestionRecorder, outcome_of, record_of, recorder_for
from ragidx.stores.access import Principal
from ragidx.stores.article_store import ArticleStore
from tests.dashboard.fakes import make_engine

CHECK_REASON = "the model judged that the articles shown do not answer the question (log-odds -1.50 < margin +0.20)"


def test_outcomes() -> None:
    answered = Answer(question="q", text="Use [1].", citations=[Citation(1, "a", "A", "u")])
    assert outcome_of(answered) == ("answered", None)
    found_nothing = Answer(question="q", text="-", not_found=True, not_found_reason="the search found nothing")
    assert outcome_of(found_nothing) == ("not_found", "the search found nothing")
    model_said = Answer(question="q", text="-", not_found=True)
    assert outcome_of(model_said) == ("not_found", "the model found no answer in the articles shown")
    declined = Answer(
        question="q", text="-", not_found=True, not_found_reason="the answer check declined", answer_check=-1.5,
        guards=[{"name": "shares_terms", "reason": "x"}, {"name": "answer_check", "reason": CHECK_REASON}],
    )  # fmt: skip
    rec = record_of(declined, id="d", question="q", surface="api", tenant=None)
    assert (rec.outcome, rec.reason, rec.check_score) == ("declined", CHECK_REASON, -1.5)
    error = record_of(None, id="e", question="q", surface="serve", tenant=None, error=TimeoutError("slow\nmore"))
    assert (error.outcome, error.reason, error.articles, error.check_score) == ("error", "TimeoutError: slow", (), None)


def test_a_record_names_the_reader_the_articles_shown_and_the_conversation() -> None:
    answer = Answer(
        question="q", text="Use [1].", citations=[Citation(1, "b", "B", "u")], model="qwen",
        articles=[{"kb_id": "a", "metadata": {"article_rank": 1}}, {"kb_id": "b", "metadata": {"article_rank": 2}}],
        timings={"retrieval": 0.1, "total": 2.0}, guard_profile={"profile": "small-model"},
    )  # fmt: skip
    rec = record_of(
        answer, id="x", question="and tables?", reader=Principal.of("ann", ["hr"]), surface="serve", tenant="acme",
        history=[("user", "how do I print?"), ("assistant", "Use File > Print [1].")],
    )  # fmt: skip
    assert (rec.reader, rec.groups, rec.tenant, rec.model, rec.guard_profile) == (
        "user:ann",
        ("hr",),
        "acme",
        "qwen",
        "small-model",
    )
    assert [(a.kb_id, a.rank, a.cited) for a in rec.articles] == [("a", 1, False), ("b", 2, True)]
    assert rec.conversation == (("user", "how do I print?"), ("assistant", "Use File > Print [1]."))
    assert dict(rec.timings) == {"retrieval": 0.1, "total": 2.0}


def test_a_log_that_cannot_be_written_never_fails_the_answer_and_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    unreachable = ArticleStore("postgresql://u:p@127.0.0.1:9/none", retry_delays_s=())  # port 9: nothing listens
    recorder = QuestionRecorder(QuestionLog(unreachable, tenant=None, retention_days=None))
    answer = Answer(question="q", text="t")
    with caplog.at_level(logging.DEBUG, logger="ragidx.questions.recorder"):
        assert recorder.record(answer, question="q", surface="api") is None
        assert recorder.record(answer, question="q", surface="api") is None

        async def asked() -> Answer:
            return answer

        assert asyncio.run(recorder.logged(asked(), "q")) is answer  # the answer, unlogged (no question_id)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "answers go on unlogged" in warnings[0].getMessage()


@pytest.fixture()
def engine(tmp_path: Path) -> Iterator[Engine]:
    settings = Settings(data_dir=tmp_path / "data", plan_searches="never", max_tool_rounds=1)
    with make_engine(settings) as eng:
        text = "To print labels choose File New Labels and print them."
        eng.ingest([Article("labels", "Printing labels", "https://kb/labels", text, "en")], source_name="kb")
        yield eng


def test_engine_ask_logs_when_asked_and_feedback_goes_to_the_log(engine: Engine) -> None:
    plain = engine.ask("How do I print labels?")
    assert plain.question_id is None
    log = recorder_for(engine).log
    assert log is not None and not log.records()
    answer = engine.ask("How do I print labels? My card is 4111 1111 1111 1111", user="ann", log=True)
    assert answer.question_id is not None and not answer.not_found
    (rec,) = log.records()
    assert (rec.id, rec.surface, rec.reader, rec.outcome) == (answer.question_id, "api", "user:ann", "answered")
    assert rec.question == "How do I print labels? My card is [card]"
    with pytest.raises(QuestionNotFound):
        engine.feedback(answer.question_id, "down", user="bob")
    engine.feedback(answer.question_id, "down", user="ann", comment="outdated", wrong_article="labels")
    assert [(f.vote, f.wrong_article) for f in log.feedback_for([rec.id])[rec.id]] == [("down", "labels")]
    again = asyncio.run(engine.aask("How do I print labels?", log=True))
    assert again.question_id is not None and again.question_id in log.get([again.question_id])


def test_a_turn_that_raises_is_logged_as_an_error_and_raises_on(engine: Engine) -> None:
    history = [ChatMessage(role="user", content="hello")]
    with pytest.raises(ValueError, match="pass either session_id or history"):
        engine.ask("How do I print labels?", "s1", history=history, log=True)
    log = recorder_for(engine).log
    assert log is not None
    (rec,) = log.records()
    assert (rec.outcome, rec.reason) == ("error", "ValueError: pass either session_id or history, not both")
    assert rec.conversation == (("user", "hello"),)


def test_with_the_log_off_nothing_is_logged(tmp_path: Path) -> None:
    with make_engine(Settings(data_dir=tmp_path / "data", questions={"enabled": False})) as eng:
        assert eng.ask("How do I print labels?", log=True).question_id is None
        assert recorder_for(eng).log is None
