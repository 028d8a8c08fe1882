from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragidx.agent.answer import Answer, Citation
from ragidx.dashboard.feedback import FEEDBACK_FILE, FeedbackLog


def test_ratings_are_appended_one_json_line_each(tmp_path: Path) -> None:
    answer = Answer(
        question="How do I number pages?",
        text="Use Insert > Field > Page Number [1].",
        citations=[Citation(1, "pages", "Page Numbers", "https://kb/pages")],
        articles=[{"kb_id": "pages"}, {"kb_id": "footers"}],
        model="qwen2.5-1.5b",
    )
    log = FeedbackLog(tmp_path / "data")
    log.record(answer, "down", answer_id="a1", session_id="s1")
    log.record(answer, None, answer_id="a1", session_id="s1")  # taken back
    lines = (tmp_path / "data" / FEEDBACK_FILE).read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    assert {k: first[k] for k in ("answer_id", "session_id", "rating", "question", "cited", "shown", "model")} == {
        "answer_id": "a1",
        "session_id": "s1",
        "rating": "down",
        "question": "How do I number pages?",
        "cited": ["pages"],
        "shown": ["pages", "footers"],
        "model": "qwen2.5-1.5b",
    }
    assert first["answer"] == answer.text and first["time"].endswith("Z")
    assert [r["rating"] for r in log.read()] == ["down", None]
    with pytest.raises(ValueError, match="give 'up', 'down' or None"):
        log.record(answer, "meh", answer_id="a2")  # type: ignore[arg-type]
