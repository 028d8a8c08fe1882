"""``benchmarks/conversations.py`` on the Writer articles: real stores and agent, the scripted chat model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmarks.helpers import load_benchmark


def test_a_follow_up_is_searched_with_the_question_before_it_and_scored(
    tmp_path: Path, writer_kb_file: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.dashboard.fakes import make_engine

    benchmark = load_benchmark("conversations")
    monkeypatch.setattr(benchmark, "Engine", make_engine)  # it answers with the titles of the articles shown
    conversations = tmp_path / "conversations.jsonl"
    turns = [
        {"question": "How do I create a table of contents?", "answers": ["Table of Contents"], "kind": "first"},
        {"question": "And how do I update it?", "answers": ["Table of Contents"], "kind": "follow-up"},
    ]
    conversations.write_text(json.dumps({"id": "c1", "turns": turns}) + "\n")
    out = tmp_path / "rows.jsonl"

    code = benchmark.main(
        ["--kb", writer_kb_file, "--data-dir", str(tmp_path / "idx"), "--conversations", str(conversations),
         "--out", str(out)]
    )  # fmt: skip

    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["conversations"], result["turns"]) == (1, 2)
    assert result["first"] == {"right": 1, "of": 1} and result["follow-up"] == {"right": 1, "of": 1}
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[1]["queries"] == ["How do I create a table of contents? And how do I update it?"]
