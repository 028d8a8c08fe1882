from __future__ import annotations

import pytest

from ragidx.agent.answer import Answer, Citation
from ragidx.budget.report import ArticleOutcome, BudgetReport
from ragidx.dashboard.answers import (
    AnswerStream,
    article_rows,
    budget_view,
    citation_lines,
    default_call,
    flash_reasons,
    safe_markdown,
    token_rows,
)


def _article(kb_id: str, title: str, score: float, rank: float, **meta: object) -> dict[str, object]:
    return {
        "kb_id": kb_id,
        "title": title,
        "url": "",
        "content": "x",
        "metadata": {"rerank_score": score, "normalized_rank": rank, **meta},
    }


def test_citation_lines_link_titles_and_escape_brackets() -> None:
    answer = Answer(
        question="q",
        text="t [1] [2]",
        citations=[Citation(1, "a", "Tables [Writer]", "https://kb/a"), Citation(2, "b", "", "")],
    )
    assert citation_lines(answer) == ["[1] [Tables \\[Writer\\]](https://kb/a)", "[2] b (b)"]


def test_citation_lines_show_the_page_and_section_a_document_citation_links_to() -> None:
    published = Citation(1, "guide.pdf", "Guide", "https://docs.example/guide.pdf#page=2", where="p. 2, Naming Cells")
    answer = Answer(question="q", text="t [1]", citations=[published])
    assert citation_lines(answer) == ["[1] [Guide](https://docs.example/guide.pdf#page=2) — p. 2, Naming Cells"]
    # a local file (ingested without --base-url) is no link in a web page; its place is still said
    local = Citation(1, "guide.pdf", "Guide", "file:///kb/guide.pdf#page=2", where="p. 2, Naming Cells")
    answer = Answer(question="q", text="t [1]", citations=[local])
    assert citation_lines(answer) == ["[1] Guide (guide.pdf) — p. 2, Naming Cells"]
    assert answer.render().splitlines()[-1] == "[1] Guide (p. 2, Naming Cells) — file:///kb/guide.pdf#page=2"
    # ... unless the dashboard serves the ingested files: then it links to its copy, at the page
    served = Citation(1, "manuals/Calc guide(2).pdf", "Guide", "file:///kb/manuals/Calc%20guide(2).pdf#page=2")
    answer = Answer(question="q", text="t [1]", citations=[local, served])
    assert citation_lines(answer, served_files=True) == [
        "[1] [Guide](documents/guide.pdf#page=2) — p. 2, Naming Cells",
        "[1] [Guide](documents/manuals/Calc%20guide%282%29.pdf#page=2)",
    ]


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        " JavaScript:alert(1)",
        "java\tscript:alert(1)",
        "data:text/html,<b>x</b>",
        "file:///etc/passwd",
        "vbscript:x",
        "//evil.example/x",
        "/relative",
    ],
)
def test_a_url_that_is_not_http_is_never_a_link(url: str) -> None:
    answer = Answer(question="q", text="t [1]", citations=[Citation(1, "k1", "Tables", url)])
    assert citation_lines(answer) == ["[1] Tables (k1)"]


def test_citation_lines_escape_control_characters_and_keep_links_whole() -> None:
    answer = Answer(
        question="q",
        text="t [1] [2]",
        citations=[
            Citation(1, "id\x00\u202e", "Report\u202etxt.exe\x1b[2J", "https://kb.example/a b) [x](javascript:y)"),
            Citation(2, "k2\x1b", "", "javascript:alert(1)"),
        ],
    )
    assert citation_lines(answer) == [
        "[1] [Report\\u202etxt.exe\\x1b\\[2J](https://kb.example/a%20b%29%20[x]%28javascript:y%29)",
        "[2] k2\\x1b (k2\\x1b)",
    ]


def test_safe_markdown_keeps_web_links_and_unlinks_the_rest() -> None:
    text = (
        "Use [Tables](https://help.example/tables) [1].\n"
        "Not [this](javascript:alert(document.cookie)) nor ![that](data:image/svg+xml,x) nor <vbscript:x>.\n"
        "[ref]: javascript:alert(1)\n"
        "Spoof\u202eexe.txt\x1b[31m"
    )
    assert safe_markdown(text).splitlines() == [
        "Use [Tables](https://help.example/tables) [1].",
        "Not [this]\\(javascript:alert(document.cookie)) nor ![that]\\(data:image/svg+xml,x) nor \\<vbscript:x>.",
        "\\[ref]: javascript:alert(1)",
        "Spoof\\u202eexe.txt\\x1b[31m",
    ]


def test_rows_and_reasons_show_titles_and_ids_escaped() -> None:
    answer = Answer(
        question="q",
        text="t",
        articles=[_article("k\x00", "T\u202eitle", 0.9, 0.0, flash_reason="why\x1b")],
    )
    row = article_rows(answer)[0]
    assert (row["Article"], row["Id"], row["Why the reranker kept it"]) == ("T\\u202eitle", "k\\x00", "why\\x1b")
    assert flash_reasons(answer) == [("T\\u202eitle", "why\\x1b")]


def test_article_rows_keep_order_ranks_citations_and_flash_reasons() -> None:
    answer = Answer(
        question="q",
        text="t",
        citations=[Citation(1, "b", "B", "")],
        articles=[_article("a", "A", 2.5, 0.0), _article("b", "B", 1.23456, 1.0, flash_reason="names the menu")],
    )
    rows = article_rows(answer)
    assert list(rows[0]) == ["#", "Article", "Relevance score", "Place (0 best, 1 last)", "Cited as", "Id"]
    assert [(r["#"], r["Id"], r["Relevance score"], r["Place (0 best, 1 last)"], r["Cited as"]) for r in rows] == [
        (1, "a", 2.5, 0.0, ""),
        (2, "b", 1.2346, 1.0, "[1]"),
    ]
    assert rows[1]["Why the reranker kept it"] == "names the menu"
    assert flash_reasons(answer) == [("B", "names the menu")]


def test_token_rows_give_before_and_after_per_article() -> None:
    report = BudgetReport(
        context_window=4096,
        articles=[
            ArticleOutcome(kb_id="a", title="A", tokens_before=900, tokens_after=400, status="compressed"),
            ArticleOutcome(kb_id="b", tokens_before=300, tokens_after=0, status="dropped", normalized_rank=1.0),
        ],
    )
    assert [(r["article"], r["stage"], r["tokens"], r["status"]) for r in token_rows(report)] == [
        ("1. A", "before", 900, "compressed"),
        ("1. A", "after", 400, "compressed"),
        ("2. b", "before", 300, "dropped"),
        ("2. b", "after", 0, "dropped"),
    ]


def test_budget_view_names_every_fallback() -> None:
    report = BudgetReport(
        context_window=4096,
        tokens_before=6000,
        tokens_after=3000,
        path=["deduplicated", "compressed", "fallback_recommended"],
        compressor="llm_summary",
        fallback_recommended=True,
        fallback_reason="articles below the minimum",
        articles=[
            ArticleOutcome(kb_id="a", title="A", fallback_reason="overshoot"),
            ArticleOutcome(kb_id="b", title="B", status="dropped", fallback_reason="below_relevance_floor"),
        ],
    )
    answer = Answer(question="q", text="t", model="gpt-4o", fallback_reason="window too small")
    view = budget_view(report, answer)
    assert view.left_out == ["B"]  # scored too low: said apart, not as a compressor fallback
    assert view.path == "deduplicated → compressed → fallback_recommended" and view.compressor == "llm_summary"
    assert view.notes == [
        "budget recommends a larger model: articles below the minimum",
        "A: compressor output replaced (overshoot)",
        "answered by fallback model 'gpt-4o': window too small",
    ]
    assert round(view.used_pct) == 73


def test_default_call_prefers_the_last_call_that_measured_articles() -> None:
    with_articles = BudgetReport(context_window=1, articles=[ArticleOutcome(kb_id="a")])
    empty = BudgetReport(context_window=1)
    assert default_call([empty, with_articles, empty]) == 1
    assert default_call([empty, empty]) == 1
    assert default_call([]) == 0


def test_answer_stream_splits_text_and_answer() -> None:
    final = Answer(question="q", text="Hello [1]")
    stream = AnswerStream(iter(["Hel", "lo [1]", final]))
    assert list(stream.pieces()) == ["Hel", "lo [1]"] and stream.answer is final
    unfinished = AnswerStream(iter(["x"]))
    with pytest.raises(RuntimeError, match="ended without an Answer"):
        _ = unfinished.answer


def test_answer_stream_hands_progress_to_its_callback() -> None:
    from ragidx.agent.answer import Progress

    seen: list[str] = []
    items = [Progress("search", query="q", articles=("A",)), "Hel", "lo", Answer(question="q", text="Hello")]
    stream = AnswerStream(iter(items), on_progress=lambda p: seen.append(p.describe()))
    assert "".join(stream.pieces()) == "Hello" and stream.answer.text == "Hello"
    assert seen == ['searched "q": 1 article (A)']


def test_guard_caption_names_the_profile_its_overrides_and_what_fired() -> None:
    from ragidx.dashboard.answers import guard_caption

    assert guard_caption(Answer(question="q", text="t")) == ""
    profile = {"profile": "small-model", "guards": [], "enabled": [], "disabled": ["ungrounded_names"]}
    fired = [{"name": "source_talk", "reason": "a sentence that only said where the answer was found was dropped"}]
    caption = guard_caption(Answer(question="q", text="t", guard_profile=profile, guards=fired))
    assert caption == (
        "Guards: small-model (-ungrounded_names) · fired: source_talk (a sentence that only said where the answer "
        "was found was dropped)"
    )
    quiet = Answer(question="q", text="t", guard_profile={"profile": "endpoint", "enabled": [], "disabled": []})
    assert guard_caption(quiet) == "Guards: endpoint · none fired"


def test_the_wait_says_the_stage_in_words_and_never_an_estimate() -> None:
    from ragidx.agent.answer import Progress
    from ragidx.dashboard.answers import stage_text

    search = Progress("search", query="page\x1b numbers", articles=("Page Numbers", "Footers"))
    assert stage_text(search) == "Searching the knowledge base: 2 articles found for “page\\x1b numbers”"
    failed = Progress("search", query="tables", error="store down")
    assert stage_text(failed) == "Searching the knowledge base: a search for “tables” failed"
    answer = Progress("prompt", call="answer", tokens=1500, articles=("A",), expected_s=21.0)
    assert answer.describe().endswith("(about 21 s)")  # the engine's estimate, which may stay while 131 s pass
    assert stage_text(answer) == "Checking the article found against your question, then answering"
    assert stage_text(Progress("prompt", call="plan", tokens=300)) == "Planning the searches"
    assert stage_text(Progress("prompt", call="decide", tokens=300)) == "Deciding whether to search again"


@pytest.mark.parametrize(
    ("waiting", "busy", "slots", "said"),
    [
        (0, 0, 1, None),
        (0, 1, 2, None),
        (0, 1, 1, "Waiting for the model: 1 question is ahead of yours"),
        (2, 1, 1, "Waiting for the model: 3 questions are ahead of yours"),
        (1, 2, 2, "Waiting for the model: 2 questions are ahead of yours"),
    ],
)
def test_the_queue_place_is_said_when_the_model_is_busy(waiting: int, busy: int, slots: int, said: str | None) -> None:
    from ragidx.dashboard.answers import queue_text

    assert queue_text(waiting, busy, slots) == said


def test_how_an_answer_was_made_reads_as_sentences() -> None:
    from ragidx.dashboard.answers import budget_sentence, exact_figures, plain_reason, plain_summary

    report = BudgetReport(
        context_window=8192,
        tokens_before=9740,
        tokens_after=3168,
        path=["below_floor", "compressed"],
        articles=[
            ArticleOutcome(kb_id="a", title="Tables", tokens_before=6000, tokens_after=2000),
            ArticleOutcome(kb_id="b", title="Fonts", status="dropped", fallback_reason="below_relevance_floor"),
        ],
    )
    answer = Answer(
        question="q",
        text="Use Table > Insert [1].",
        citations=[Citation(1, "a", "Tables", "")],
        articles=[_article("a", "Tables", 0.9, 0.0), _article("c", "Borders", 0.5, 1.0)],
        budget_reports=[report],
        model="qwen2.5-1.5b",
        answer_check=1.37,
        guard_profile={"profile": "small-model", "enabled": [], "disabled": []},
        guards=[{"name": "source_talk", "reason": "a sentence that only said where the answer was found was dropped"}],
        timings={"retrieval": 0.42, "llm": 11.9, "total": 12.5, "queue_wait": 3.0},
    )
    assert plain_summary(answer) == [
        "The model was shown 2 articles and cited 1 of them (Tables).",
        "1 article scored too far below the best one to be worth reading: Fonts.",
        "The model read 3,168 of the 8,192 tokens its window holds (39%; 9,740 before the budget): articles that "
        "scored far below the best one were left out, and long articles were shortened to their passages closest to "
        "the question.",
        "Before writing, the model checked that these articles answer the question.",
        "Checks changed the answer: a sentence that only said where the answer was found was dropped.",
        "Written by qwen2.5-1.5b.",
        "It took 12.5 s (0.4 s searching and 11.9 s with the model), after 3.0 s waiting for its turn.",
    ]
    assert budget_sentence(
        BudgetReport(context_window=4096, tokens_before=900, tokens_after=900, path=["under_trigger"])
    ) == ("The model read 900 of the 4,096 tokens its window holds (22%): nothing had to be shortened.")
    figures = dict(exact_figures(answer))
    assert figures["Answer check (log-odds of YES over NO)"] == "+1.37"
    assert figures["Budget steps, call 1"] == "below_floor → compressed" and figures["Time: total (s)"] == "12.50"
    reason = "the model judged that the articles shown do not answer the question (log-odds -0.99 < margin +0.20)"
    assert plain_reason(reason) == "the model judged that the articles shown do not answer the question"
    refused = Answer(
        question="q",
        text="I could not find",
        articles=[_article("a", "Tables", 0.9, 0.0)],
        not_found=True,
        not_found_reason=reason,
        answer_check=-0.99,
        guards=[{"name": "answer_check", "reason": reason}],
        guard_profile={"profile": "small-model", "enabled": [], "disabled": []},
    )
    said = plain_summary(refused)
    assert said[0] == "The model was shown 1 article and did not cite it."
    assert "Before writing, the model judged that these articles do not answer the question." in said
    assert "No check had to change the answer." in said and not any("log-odds" in line for line in said)
    assert dict(exact_figures(refused))["Not found because"] == reason
