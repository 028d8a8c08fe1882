"""The gaps report: unanswered and down-voted questions grouped, deterministically, with their trend, central
questions, nearest articles and a title; its JSON, CSV and Markdown; ``ragidx gaps``."""

from __future__ import annotations

import csv
import io
import json
import random
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from ragidx.article import Article
from ragidx.questions.gaps import GapReport, build_report, parse_since
from ragidx.questions.records import Outcome, QuestionRecord, ShownArticle
from tests.fakes.hash_embedding import HashEmbedding

T0 = datetime(2026, 11, 1, tzinfo=UTC)
PRICING = [
    "How much does a licence cost for our company?",
    "What does a company licence cost per year?",
    "licence cost for a company",
    "Is there a discount on the company licence cost?",
]
MOBILE = [
    "Is there an Android phone app?",
    "Where do I get the Android app for my phone?",
    "android phone app download",
    "Does the Android app work on my phone?",
]
DICTATION = [
    "How do I dictate text with my voice?",
    "Can I dictate with voice instead of typing?",
    "voice dictation of text",
]
NOISE = ["hello", "what is the weather in Paris", "tell me a joke about cats"]


def rec(
    i: int,
    question: str,
    outcome: Outcome = "not_found",
    *,
    day: float = 0,
    reader: str = "user:ann",
    shown: Sequence[str] = (),
) -> QuestionRecord:
    return QuestionRecord(
        id=f"q{i}",
        time=T0 + timedelta(days=day),
        tenant=None,
        reader=reader,
        groups=(),
        question=question,
        conversation=(),
        outcome=outcome,
        reason=None,
        check_score=None,
        articles=tuple(ShownArticle(k, n, False) for n, k in enumerate(shown, start=1)),
        timings={},
        model="m",
        guard_profile="small-model",
        surface="api",
    )


def planted_log() -> list[QuestionRecord]:
    """Pricing (not found), mobile (declined), dictation (answered, down-voted), noise, and answered questions."""
    records = [rec(i, q, "not_found", day=i, reader=f"user:r{i % 3}") for i, q in enumerate(PRICING)]
    records += [rec(10 + i, q, "declined", day=2 + i, shown=["kb-apps"]) for i, q in enumerate(MOBILE)]
    records += [rec(20 + i, q, "answered", day=3 + i) for i, q in enumerate(DICTATION)]
    records += [rec(30 + i, q, "not_found", day=4) for i, q in enumerate(NOISE)]
    records += [rec(40 + i, q, "answered", day=1) for i, q in enumerate(["How do I print a page?"] * 5)]
    return records


DOWN = {"q20", "q21", "q22"}


def report_of(records: Sequence[QuestionRecord], **kwargs: object) -> GapReport:
    """The report with hashed bags of words for embeddings (farther apart than MiniLM's: a wider cut)."""
    kwargs.setdefault("threshold", 0.7)
    return build_report(records, HashEmbedding(dim=256), downvoted=DOWN, **kwargs)  # type: ignore[arg-type]


def members(report: GapReport) -> list[set[str]]:
    return [set(c.question_ids) for c in report.clusters]


def test_unanswered_and_downvoted_questions_group_by_topic_and_noise_stays_out() -> None:
    report = report_of(planted_log())
    assert report.questions == 4 + 4 + 3 + 3  # the answered questions that nobody down-voted are no gap
    # largest first; of two as large, the one whose first question sorts first ("android phone app download")
    assert members(report) == [{"q10", "q11", "q12", "q13"}, {"q0", "q1", "q2", "q3"}, {"q20", "q21", "q22"}]
    assert [c.size for c in report.clusters] == [4, 4, 3] and report.clustered == 11
    mobile, pricing, dictation = report.clusters
    assert pricing.readers == 3 and pricing.outcomes == {"not_found": 4}
    assert dictation.outcomes == {"answered": 3, "downvoted": 3}
    assert "licence" in pricing.title.lower() and "android" in mobile.title.lower()
    assert dictation.terms[:2] == ("dictate", "voice")  # words, as the questions spell them (not stems)


def test_the_same_records_in_any_order_give_the_same_report() -> None:
    records = planted_log()
    first = report_of(records).to_dict()
    for seed in range(3):
        shuffled = list(records)
        random.Random(seed).shuffle(shuffled)
        assert report_of(shuffled).to_dict() == first


def test_min_size_and_period_choose_what_is_reported() -> None:
    records = planted_log()
    assert [c.size for c in report_of(records, min_size=4).clusters] == [4, 4]
    later = report_of(records, since=T0 + timedelta(days=2))  # pricing's questions of days 0 and 1 are before it
    assert all(m.isdisjoint({"q0", "q1"}) for m in members(later)) and later.questions == 14 - 2
    assert later.since == T0 + timedelta(days=2)
    with pytest.raises(ValueError, match="min_size"):
        report_of(records, min_size=0)


def test_representative_questions_are_the_most_central_and_shown_once() -> None:
    twice = [rec(i, q, day=i) for i, q in enumerate([*PRICING, PRICING[0], PRICING[0].upper()])]
    report = report_of(twice, representatives=3)
    (cluster,) = report.clusters
    assert cluster.size == 6  # a question asked again counts again
    assert len(cluster.questions) == 3 and len({q.lower() for q in cluster.questions}) == 3


def test_trend_counts_each_day_of_the_period_and_tells_rising_from_falling() -> None:
    rising = [rec(i, PRICING[i % 4], day=20 + i * 0.5) for i in range(8)] + [rec(99, PRICING[0], day=1)]
    report = report_of(rising, since=T0, until=T0 + timedelta(days=27))
    (cluster,) = report.clusters
    assert report.bucket == "day" and len(cluster.trend) == 28
    assert sum(n for _, n in cluster.trend) == cluster.size == 9
    assert cluster.trend[0] == ("2026-11-01", 0) and cluster.trend[1] == ("2026-11-02", 1)
    assert cluster.direction == "rising"
    falling = report_of([rec(i, PRICING[i % 4], day=i * 0.5) for i in range(8)], since=T0, until=T0 + timedelta(27))
    assert falling.clusters[0].direction == "falling"
    weekly = report_of(rising, since=T0 - timedelta(days=60), until=T0 + timedelta(days=27))
    assert weekly.bucket == "week" and all(date.fromisoformat(s).weekday() == 0 for s, _ in weekly.clusters[0].trend)


def test_nearest_articles_come_from_a_search_for_the_central_question_and_from_what_readers_were_shown() -> None:
    searched: list[str] = []

    def search(q: str) -> list[Article]:
        searched.append(q)
        return [
            Article("kb-store", "App store", "u/store", "x", metadata={"rerank_score": 0.7}),
            Article("kb-apps", "Apps", "u", "y"),
        ]

    report = build_report(planted_log(), HashEmbedding(dim=256), search, downvoted=DOWN, top_articles=2, threshold=0.7)
    mobile = report.clusters[0]
    assert searched[0] == mobile.questions[0]
    assert [(a.kb_id, a.title, a.score, a.shown) for a in mobile.articles] == [
        ("kb-store", "App store", 0.7, 0),
        ("kb-apps", "Apps", None, 4),
    ]


def test_json_export_has_clusters_with_size_questions_and_articles() -> None:
    data = json.loads(json.dumps(report_of(planted_log()).to_dict()))
    assert set(data) == {"since", "until", "bucket", "questions", "clustered", "clusters"}
    first = data["clusters"][0]
    assert {"size", "questions", "articles", "title", "terms", "trend", "direction", "readers"} <= set(first)
    assert first["size"] == 4 and first["questions"][0] in MOBILE
    assert first["trend"][:3] == [{"start": f"2026-11-0{d}", "count": n} for d, n in ((1, 0), (2, 0), (3, 1))]


def test_csv_export_is_one_row_per_gap_and_defuses_formulas() -> None:
    records = [rec(i, f"=HYPERLINK(licence cost {i})", day=i) for i in range(3)]
    rows = list(csv.reader(io.StringIO(report_of(records + planted_log()).to_csv())))
    assert rows[0][:3] == ["rank", "size", "readers"]
    assert len(rows) == 1 + len(report_of(records + planted_log()).clusters)
    cells = [cell for row in rows[1:] for cell in row]
    assert not any(cell.startswith("=") for cell in cells)
    assert any("'=HYPERLINK" in cell for cell in cells)


def test_markdown_export_escapes_what_readers_typed() -> None:
    records = [rec(i, f"licence cost | <script>x</script> [link](http://evil) {i}", day=i) for i in range(3)]
    text = report_of(records).to_markdown()
    assert text.startswith("# Knowledge-base gaps, 2026-11-01 to 2026-11-03")
    assert "<script>" not in text and "](http" not in text and "\\|" in text
    assert "## 1. " in text and "Asked as:" in text
    assert report_of([]).to_markdown().endswith("No gap was asked about often enough to report.\n")


def test_parse_since_reads_periods_and_dates() -> None:
    now = datetime(2026, 11, 28, 12, tzinfo=UTC)
    assert parse_since("30d", now=now) == now - timedelta(days=30)
    assert parse_since("2w", now=now) == now - timedelta(days=14)
    assert parse_since("12h", now=now) == now - timedelta(hours=12)
    assert parse_since("2026-11-01", now=now) == datetime(2026, 11, 1, tzinfo=UTC)
    with pytest.raises(ValueError, match="30d"):
        parse_since("last month", now=now)


def test_cli_gaps_prints_the_logged_gaps_as_json_csv_and_markdown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ragidx.cli import main
    from ragidx.config import Settings
    from ragidx.questions.log import QuestionLog
    from ragidx.stores.article_store import ArticleStore

    log = QuestionLog(ArticleStore(Settings(data_dir=tmp_path).article_db_path), tenant=None, retention_days=None)
    now = datetime.now(UTC)
    for i, q in enumerate([*PRICING, *MOBILE[:3], "hello"]):
        log.record(replace(rec(i, q, "declined" if i % 2 else "not_found"), time=now - timedelta(hours=i)))
    log.record(replace(rec(99, PRICING[0]), time=now - timedelta(days=60)))  # before the period
    base = ["--data-dir", str(tmp_path), "gaps"]
    assert main([*base, "--json", "--since", "7d"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [c["size"] for c in data["clusters"]] == [4, 3] and data["questions"] == 8
    assert set(data["clusters"][0]["questions"]) <= set(PRICING) and data["clusters"][0]["articles"] == []
    assert main([*base, "--csv", "--min-size", "4"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert main(base) == 0
    assert capsys.readouterr().out.startswith("# Knowledge-base gaps")
    assert main([*base, "--since", "last week"]) == 2
    assert "30d" in capsys.readouterr().err
