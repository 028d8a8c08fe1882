"""``benchmarks/citation_passages.py`` on five strong-style right answers: quotes and text-fragment links."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmarks.helpers import ROOT, load_benchmark

FIXTURES = ROOT / "tests" / "benchmarks" / "fixtures"


def test_every_quote_is_found_verbatim_in_its_article(capsys: pytest.CaptureFixture[str]) -> None:
    code = load_benchmark("citation_passages").main(
        ["--answers", str(FIXTURES / "strong_answers.jsonl"), "--kb", str(FIXTURES / "guard_kb.jsonl")]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # one JSON line
    result = json.loads(out)
    every = result["all"]
    assert every["citations"] >= 5 and every["quoted"] >= every["citations"] - 1
    assert every["verbatim"] == every["quoted"] and every["fragment_links"] == every["quoted"]
    assert "opened" not in every  # no --pages: no browser


def test_a_link_to_a_local_copy_of_the_page_keeps_its_fragment(tmp_path: Path) -> None:
    bench = load_benchmark("citation_passages")
    (tmp_path / "a.html").write_text("<p>x</p>")
    pages = [("https://docs.example.org/15/", tmp_path)]
    local = bench.local_page("https://docs.example.org/15/a.html#s:~:text=x", pages)
    assert local == f"{(tmp_path / 'a.html').resolve().as_uri()}#s:~:text=x"
    assert bench.local_page("https://docs.example.org/15/missing.html", pages) is None
