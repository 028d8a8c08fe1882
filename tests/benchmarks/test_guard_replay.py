"""``benchmarks/guard_replay.py`` on five strong-style right answers and a small rows file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmarks.helpers import ROOT, load_benchmark

FIXTURES = ROOT / "tests" / "benchmarks" / "fixtures"


def test_guard_replay_counts_what_each_profile_and_rule_costs_right_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    resource = "postgresql-15:runtime-config-resource.html"
    rows = [
        # a right answer of the local model: replayed from its own reply over the articles it was shown
        {"id": "r1", "question": "What is work_mem's default?", "answers": ["4MB"], "answerable": True,
         "contained": True, "model_text": "The default is 4MB [1]. This is found in article [1].",
         "shown": [{"kb_id": resource, "title": "20.4. Resource Consumption"}], "gold_kb_ids": [resource]},
        # a right answer without the model's reply (an older run): counted as skipped
        {"id": "r2", "question": "q", "answers": ["x"], "contained": True, "shown": []},
        # a wrong answer: not replayed
        {"id": "r3", "question": "q", "answers": ["x"], "contained": False, "model_text": "y", "shown": []},
    ]  # fmt: skip
    rows_file = tmp_path / "pg.jsonl"
    rows_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    details = tmp_path / "lost.jsonl"

    code = load_benchmark("guard_replay").main(
        ["--answers", str(FIXTURES / "strong_answers.jsonl"), "--rows", str(rows_file),
         "--kb", str(FIXTURES / "guard_kb.jsonl"), "--details", str(details)]
    )  # fmt: skip

    assert code == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # one JSON line
    result = json.loads(out)
    strong = result["inputs"]["strong_answers"]
    assert strong["value_in_reply"] == 5
    # the endpoint profile keeps every right answer, its value and its citation
    assert strong["profiles"]["endpoint"] == {
        "answers": 5, "lost": 0, "not_found": 0, "value_lost": 0, "citation_lost": 0, "fired": {}
    }  # fmt: skip
    # the small-model profile declines all five: two or more names (3), a shortcut (1), a hedge that opens
    # with "does not mention" (1), each counted under its rule
    small = strong["profiles"]["small-model"]
    assert (small["not_found"], small["fired"]) == (
        5, {"model_not_found": 1, "ungrounded_names": 3, "ungrounded_shortcuts": 1}
    )  # fmt: skip
    rules = strong["rules"]
    assert rules["ungrounded_names"]["not_found"] == 4 and rules["ungrounded_shortcuts"]["not_found"] == 1
    assert rules["model_not_found"]["not_found"] == 1 and rules["model_not_found(endpoint)"]["lost"] == 0
    assert rules["echoed_source_list"]["lost"] == 0  # it drops the closing source line, the citation stays
    # the rows file: one right answer replayed, one skipped; source talk moves its marker, nothing is lost
    pg = result["inputs"]["pg"]
    assert pg["skipped"] == 1 and pg["profiles"]["small-model"]["answers"] == 1
    assert pg["profiles"]["small-model"]["lost"] == 0 and pg["profiles"]["small-model"]["fired"] == {"source_talk": 1}
    assert result["all"]["profiles"]["endpoint"]["answers"] == 6
    lost = [json.loads(line) for line in details.read_text().splitlines()]
    assert {d["id"] for d in lost if d.get("profile") == "small-model"} == {
        "fx_pg_mysql", "fx_pg_shmmax", "fx_pg_listen", "fx_en_protect", "fx_ru_pages"
    }  # fmt: skip


def test_guard_replay_names_an_article_no_kb_holds(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match=r"is in no --kb file; pass the KB that holds it"):
        load_benchmark("guard_replay").main(["--answers", str(FIXTURES / "strong_answers.jsonl"), "--kb", str(empty)])
