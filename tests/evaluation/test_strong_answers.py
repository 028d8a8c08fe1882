"""The committed strong-style right answers: shape, counts, and each line against the bundled LibreOffice KBs.

The PostgreSQL KB is not in the repository; ``benchmarks/strong_answers_check.py --kb postgresql15=PATH``
checks those lines against it the same way.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from ragidx.evaluation.answers import contains_answer
from tests.benchmarks.helpers import load_benchmark

check_script = load_benchmark("strong_answers_check")

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = {
    "libreoffice_en": ROOT / "ragidx" / "data" / "kb" / "libreoffice_en_sample.jsonl",
    "libreoffice_ru": ROOT / "ragidx" / "data" / "kb" / "libreoffice_ru_sample.jsonl",
}


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    return check_script.load_rows()


@pytest.fixture(scope="module")
def kbs() -> dict[str, dict[str, dict[str, Any]]]:
    return {name: check_script.load_kb(path) for name, path in BUNDLED.items()}


def test_fields_and_types(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        assert set(row) == set(check_script.FIELDS), row.get("id")
        for field, kind in check_script.FIELDS.items():
            assert isinstance(row[field], kind), (row["id"], field)
        assert all(isinstance(n, int) for n in row["cited"]), row["id"]
        assert all(set(s) == {"kb_id", "title", "url"} for s in row["sources"]), row["id"]
        assert 1 <= len(row["sources"]) <= 4, row["id"]
        assert "written by hand" in row["provenance"], row["id"]


def test_counts(rows: list[dict[str, Any]]) -> None:
    assert len(rows) >= 72
    ids = [r["id"] for r in rows]
    assert len(set(ids)) == len(ids)
    per_kb = {kb: sum(r["kb"] == kb for r in rows) for kb in check_script.KBS}
    assert all(n >= 20 for n in per_kb.values()), per_kb
    per_style = {s: sum(s in r["style"] for r in rows) for s in check_script.STYLES}
    assert all(n >= 8 for n in per_style.values()), per_style


def test_citations_and_golds_in_reply(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        assert row["cited"] and all(1 <= n <= len(row["sources"]) for n in row["cited"]), row["id"]
        assert all(f"[{n}]" in row["reply"] for n in row["cited"]), row["id"]
        for form in row["answers"]:
            assert contains_answer(row["reply"], [form]), (row["id"], form)


def test_russian_kb_answers_in_russian(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        cyrillic = sum("а" <= ch.lower() <= "я" or ch in "ёЁ" for ch in row["reply"])
        letters = sum(ch.isalpha() for ch in row["reply"])
        if row["kb"] == "libreoffice_ru":
            assert "russian" in row["style"] and cyrillic > letters / 2, row["id"]
        else:
            assert "russian" not in row["style"] and cyrillic == 0, row["id"]


@pytest.mark.parametrize("kb", sorted(BUNDLED))
def test_lines_hold_against_bundled_kb(rows: list[dict[str, Any]], kbs: dict[str, Any], kb: str) -> None:
    lines = [r for r in rows if r["kb"] == kb]
    articles = kbs[kb]
    for row in lines:
        for source in row["sources"]:
            article = articles[source["kb_id"]]
            assert (article["title"], article["url"]) == (source["title"], source["url"]), row["id"]
        cited = [articles[row["sources"][n - 1]["kb_id"]]["text"] for n in row["cited"]]
        for form in row["answers"]:
            assert any(contains_answer(text, [form]) for text in cited), (row["id"], form)
    result = check_script.check(lines, {kb: articles})
    assert result["problems"] == []
    assert result["kb_checked"] == [kb]


def _broken(rows: list[dict[str, Any]], kb: str, change: str) -> dict[str, Any]:
    row = copy.deepcopy(next(r for r in rows if r["kb"] == kb and "quote" in r["style"] and len(r["sources"]) > 1))
    if change == "gold not in reply":
        row["answers"] = [*row["answers"], "Tools - Nonexistent Command"]
    elif change == "cited out of range":
        row["cited"] = [len(row["sources"]) + 1]
    elif change == "wrong title":
        row["sources"][0]["title"] = "Some Other Page"
    elif change == "neighbour cited":
        row["cited"] = [2]
        row["reply"] += " [2]"
    elif change == "quote not verbatim":
        row["reply"] = row["reply"].replace('"', "").replace("«", "").replace("»", "").replace("“", "")
    return row


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("gold not in reply", "not in the reply"),
        ("cited out of range", "outside the"),
        ("wrong title", "title/url differ"),
        ("neighbour cited", "in no cited article's text"),
        ("quote not verbatim", "no quoted sentence"),
    ],
)
def test_checker_reports_a_broken_line(
    rows: list[dict[str, Any]], kbs: dict[str, Any], change: str, expected: str
) -> None:
    row = _broken(rows, "libreoffice_en", change)
    problems = check_script.row_problems(row, kbs["libreoffice_en"])
    assert any(expected in p for p in problems), problems


def test_checker_cli_reports_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [f"--kb={name}={path}" for name, path in BUNDLED.items()]
    assert check_script.main(args) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert '"problems": 0' in line and '"kb_checked": ["libreoffice_en", "libreoffice_ru"]' in line
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x"}\n', encoding="utf-8")
    assert check_script.main(["--data", str(bad)]) == 1
