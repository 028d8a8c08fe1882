"""The dashboard's Gaps page through Streamlit's AppTest: a gap of the question log shown with its questions, a
curated answer pinned to it from its form, then listed as served; and the hint when the log holds no gap."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from ragidx.article import Article
from ragidx.config import Settings
from ragidx.questions.curated import curated_answers
from ragidx.questions.log import QuestionLog
from ragidx.questions.records import QuestionRecord
from tests.dashboard.fakes import make_engine
from tests.dashboard.test_app import start

DROPBOX = ["How do I sync with Dropbox?", "how do I sync with Dropbox", "How do I sync with Dropbox??"]


def test_the_gaps_page_shows_a_gap_and_pins_a_curated_answer_to_it(dashboard_env: Path) -> None:
    with make_engine(Settings(data_dir=dashboard_env)) as engine:
        engine.ingest([Article("files", "Saving files", "u/files", "Save files with File > Save.", "en")])
        log = QuestionLog(engine.article_store, tenant=None, retention_days=None)
        for i, q in enumerate(DROPBOX):
            log.record(
                QuestionRecord(f"q{i}", datetime.now(UTC), None, "user:ann", (), q, (), "not_found", None, None, (), {},
                               "m", "small-model", "dashboard")
            )  # fmt: skip

    at = start("gaps")
    table = at.dataframe[0].value
    assert list(table["questions"]) == [3] and "dropbox" in table.iloc[0]["suggested article"].lower()
    at.text_area(key="gap_answer_1").set_value("Save into your Dropbox folder [1].")
    at.text_input(key="gap_cites_1").set_value("files")
    at.button[0].click().run()  # the form's submit button
    assert not at.exception, at.exception
    assert at.success, [e.value for e in at.error]

    with make_engine(Settings(data_dir=dashboard_env)) as engine:
        (entry,) = curated_answers(engine).entries()
        assert entry.state == "live" and entry.answer.citations[0].kb_id == "files"
        assert set(entry.answer.questions) <= set(DROPBOX)


def test_without_gaps_the_page_says_so(dashboard_env: Path) -> None:
    at = start("gaps")
    assert not at.exception and "No gap" in at.info[0].value
    assert "None yet" in at.info[1].value
