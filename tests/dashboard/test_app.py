"""The dashboard through Streamlit's AppTest: every page, on the real Engine with a scripted LLM."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from tests.dashboard.conftest import APP

TIMEOUT = 120
TOC = "Creating a Table of Contents"
CHAT = "ragidx/dashboard/pages/chat.py"
RAW = ("log-odds", "under_trigger", "rerank_score", "normalized_rank", "Path:", "→")
"""Engine names and raw figures that the chat shows only in its exact figures."""


def start(page: str | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    assert not at.exception, at.exception
    if page:
        at.switch_page(f"ragidx/dashboard/pages/{page}.py").run()
        assert not at.exception, at.exception
    return at


def tune(at: AppTest, **values: Any) -> AppTest:
    """Set widgets of the Tuning page by key, then come back to the chat (the choices last for the session)."""
    at.switch_page("ragidx/dashboard/pages/tuning.py").run()
    for key, value in values.items():
        at.get_by_key(key).set_value(value)
    at.run()
    assert not at.exception, at.exception
    at.switch_page(CHAT).run()
    assert not at.exception, at.exception
    return at


def ask(at: AppTest, question: str) -> AppTest:
    at.chat_input(key="question").set_value(question).run()
    assert not at.exception, at.exception
    return at


def charts(at: AppTest) -> list[dict[str, Any]]:
    """Each chart's Vega-Lite spec, with the rows Streamlit moved out to Arrow put back under ``data``."""
    from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df

    specs = []
    for chart in at.get("vega_lite_chart"):
        spec = json.loads(chart.proto.spec)
        if chart.proto.HasField("data"):
            spec["data"] = {"values": convert_arrow_bytes_to_pandas_df(chart.proto.data.data).to_dict("records")}
        specs.append(spec)
    return specs


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def figures(block: Any) -> dict[str, str]:
    """The exact figures table of an answer's engineering view."""
    table = block.table[0].value
    return dict(zip(table["figure"], table["value"], strict=True))


def how_made(message: Any) -> Any:
    """The answer's "How this answer was made" expander (after "Where the sources say it" when a citation quotes)."""
    return next(e for e in message.expander if e.label == "How this answer was made")


def shown_text(block: Any) -> list[str]:
    """Every text in words the block shows (markdown, captions, notes): what a person reads without the tables."""
    return [e.value for kind in ("markdown", "caption", "info", "warning", "error") for e in getattr(block, kind)]


# --- chat ------------------------------------------------------------------------------------------
def test_chat_answer_shows_its_sources_and_how_it_was_made_one_click_away(kb_dir: Path) -> None:
    at = ask(start(), "How do I create a table of contents?")
    user, assistant = at.chat_message
    assert user.markdown[0].value == "How do I create a table of contents?"
    text = assistant.markdown[0].value
    assert f"“{TOC}” [1]" in text
    sources = next(m.value for m in assistant.markdown if m.value.startswith("**Sources**"))
    assert f"[1] [{TOC}](https://help.libreoffice.org/" in sources

    where = assistant.expander[0]  # each cited sentence highlighted in its article, collapsed too
    assert where.label == "Where the sources say it" and not where.proto.expanded
    assert ":orange-background[" in where.markdown[0].value
    how = how_made(assistant)
    assert not how.proto.expanded  # collapsed: one click away
    words, exact = how.tabs
    said = words.markdown[0].value
    assert "The model was shown 5 articles and cited 2 of them" in said and TOC in said
    assert "nothing had to be shortened" in said and "Written by scripted" in said
    assert not any(raw in line for line in shown_text(assistant) for raw in RAW)  # plain words everywhere

    table = exact.dataframe[0].value
    assert list(table.columns) == ["#", "Article", "Relevance score", "Place (0 best, 1 last)", "Cited as", "Id"]
    assert table["Article"].iloc[0] == TOC and table["Cited as"].iloc[0] == "[1]"
    assert table["Place (0 best, 1 last)"].iloc[0] == 0.0 and table["Place (0 best, 1 last)"].iloc[-1] == 1.0
    assert list(table["Relevance score"]) == sorted(table["Relevance score"], reverse=True)
    shown = metrics(at)
    assert shown["Compressor"] == "extractive" and shown["Window (tokens)"] == "8,192"
    assert all(m.proto.delta == "" for m in at.metric)  # no "↓ -6572": before and after are both said
    gauge = charts(at)[0]
    lines = {row["line"]: row["tokens"] for row in gauge["layer"][1]["data"]["values"]}
    assert lines["window"] == 8192 and lines["target"] < lines["trigger"] < lines["hard limit"] < 8192
    exact_figures = figures(exact)
    assert exact_figures["Model"] == "scripted" and "under_trigger" in exact_figures["Budget steps, call 1"]
    # the guard profile of the configured (local) model
    assert exact_figures["Guards"] == "small-model · none fired"


def test_an_empty_chat_offers_titles_of_the_knowledge_base_and_asks_about_one(
    kb_dir: Path, writer_kb_file: str
) -> None:
    at = start()
    titles = {json.loads(line)["title"] for line in Path(writer_kb_file).read_text(encoding="utf-8").splitlines()}
    examples = [b for b in at.button if str(b.key).startswith("example_")]
    assert "Try asking about:" in [m.value.strip("*") for m in at.markdown]
    assert len(examples) == 4 and {b.label for b in examples} <= titles
    picked = examples[1].label
    examples[1].click().run()
    assert not at.exception, at.exception
    assert at.chat_message[0].markdown[0].value == f"What does “{picked}” cover?"
    assert f"“{picked}”" in at.chat_message[1].markdown[0].value  # the scripted model cites what was found
    assert not [b for b in at.button if str(b.key).startswith("example_")]  # the chat has begun


def logged(data_dir: Path) -> tuple[list[Any], dict[str, list[Any]]]:
    """The question log of the dashboard's knowledge base: its questions and their feedback."""
    from ragidx.config import Settings
    from ragidx.questions.recorder import log_for
    from ragidx.stores.factory import build_article_store

    settings = Settings(data_dir=data_dir)
    store = build_article_store(settings)
    try:
        log = log_for(settings, store)
        assert log is not None
        records = log.records()
        return records, log.feedback_for([r.id for r in records])
    finally:
        store.close()


def test_each_answer_is_logged_and_its_thumbs_stored_with_it(kb_dir: Path) -> None:
    at = ask(start(), "How do I create a table of contents? Call me on +44 20 7946 0958")
    (record,), votes = logged(kb_dir)
    assert record.question == "How do I create a table of contents? Call me on [phone]"
    assert (record.surface, record.outcome, record.reader, record.model) == ("dashboard", "answered", "", "scripted")
    assert any(a.cited for a in record.articles) and not votes
    at.chat_message[1].feedback[0].set_value(0).run()  # 0: thumbs down
    assert not at.exception, at.exception
    assert [f.vote for f in logged(kb_dir)[1][record.id]] == ["down"]
    at.chat_message[1].feedback[0].set_value(1).run()  # changed to up: the last vote counts
    assert [f.vote for f in logged(kb_dir)[1][record.id]] == ["up"]
    at.chat_message[1].feedback[0].set_value(None).run()  # taken back
    assert record.id not in logged(kb_dir)[1]


def test_a_2k_window_from_the_tuning_page_compresses_articles(kb_dir: Path) -> None:
    """The local model reads articles as plain text (cheaper than their JSON, and counted as sent): at 2K
    they fit under the default trigger, so the Tuning page lowers it too."""
    at = tune(start(), set_window=2048, set_top_k=10, set_trigger=50, set_target=45)
    assert any("settings changed on the Tuning page" in c.value for c in at.sidebar.caption)
    ask(at, "How do I create, edit and format a table of contents or an index?")
    assert metrics(at)["Window (tokens)"] == "2,048"
    said = how_made(at.chat_message[1]).tabs[0].markdown[0].value
    assert "2,048 tokens its window holds" in said and "before the budget" in said
    assert any(step in said for step in ("shortened to their passages", "left out to make room", "cut off"))
    gauge, tokens = charts(at)
    assert gauge["layer"][0]["encoding"]["x"]["scale"]["domain"][1] >= 2048
    rows = tokens["data"]["values"]
    before = {r["article"]: r["tokens"] for r in rows if r["stage"] == "before"}
    after = {r["article"]: r["tokens"] for r in rows if r["stage"] == "after"}
    assert len(before) >= 3 and sum(after.values()) < sum(before.values())
    sent = next(r["tokens"] for r in gauge["layer"][0]["data"]["values"] if r["part"] == "prompt sent")
    hard = next(r["tokens"] for r in gauge["layer"][1]["data"]["values"] if r["line"] == "hard limit")
    assert sent <= hard < 2048


def test_the_tuning_page_keeps_its_choices_and_goes_back_to_the_configured_settings(kb_dir: Path) -> None:
    at = tune(start(), set_window=4096)
    at.switch_page("ragidx/dashboard/pages/tuning.py").run()
    assert at.selectbox(key="set_window").value == 4096  # kept while the chat was open
    at.button(key="reset_tuning").click().run()
    assert at.selectbox(key="set_window").value == 8192
    assert not any("Tuning page" in c.value for c in at.sidebar.caption)


def test_an_empty_knowledge_base_answers_not_found_without_citations(dashboard_env: Path) -> None:
    at = start()
    assert "The knowledge base is empty" in at.sidebar.info[0].value
    assert not [b for b in at.button if str(b.key).startswith("example_")]
    ask(at, "What is the boiling point of tungsten?")
    assistant = at.chat_message[1]
    assert "could not find" in assistant.markdown[0].value
    assert "The knowledge base does not answer this: the search found no article." in [i.value for i in assistant.info]
    assert not any(m.value.startswith("**Sources**") for m in assistant.markdown)
    assert "The search found no article for this question." in how_made(assistant).tabs[0].markdown[0].value


def test_a_window_too_small_shows_the_engines_reason(kb_dir: Path) -> None:
    at = ask(tune(start(), set_window=2048, set_max_out=2000), "How do I create a table of contents?")
    errors = [e.value for e in at.chat_message[1].error]
    assert errors and "ContextWindowTooSmallError" in errors[0] and "2048" in errors[0]


def test_a_dead_endpoint_shows_its_cause_and_what_to_do(kb_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ragidx.dashboard.engines import FACTORY_ENV
    from tests.endpoints import dead_endpoint

    url = dead_endpoint()
    monkeypatch.setenv(FACTORY_ENV, "tests.dashboard.fakes:make_endpoint_engine")
    monkeypatch.setenv("RAGIDX_LLM__API_BASE", url)
    monkeypatch.setenv("RAGIDX_LLM__MAX_RETRIES", "0")
    at = ask(start(), "How do I create a table of contents?")
    errors = [e.value for e in at.chat_message[1].error]
    assert errors and f"at {url} failed 1 time" in errors[0] and "connection refused" in errors[0]
    assert "RAGIDX_LLM__API_BASE" in errors[0] and "nested async" not in errors[0]


def test_titles_ids_and_urls_from_the_kb_cannot_spoof_the_page_or_link_to_script(
    dashboard_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragidx.article import Article
    from ragidx.config import Settings
    from ragidx.safe_text import UNSAFE_CHARACTERS
    from tests.dashboard.fakes import make_engine

    text = "Set the page margins with Format > Page Style > Page; the margins are measured in centimetres."
    evil = [
        Article("evil\x00id", "Page margins\u202etxt.exe\x1b[2J", "javascript:alert(document.cookie)", text),
        Article(
            "data-url", "Page margins", "data:text/html,<script>alert(1)</script>", f"How to set page margins. {text}"
        ),
        Article("link-title", "[Click me](https://evil.example/x)", "https://kb/x", f"Margins again. {text}"),
    ]
    with make_engine(Settings(data_dir=dashboard_env)) as engine:
        assert engine.ingest(evil).new == 3
    monkeypatch.setenv("RAGIDX_BUDGET_RELEVANCE_FLOOR", "0")  # every article reaches the model, two are cited
    at = ask(start(), "How do I set page margins?")
    assistant = at.chat_message[1]
    shown = shown_text(assistant)
    sources = next(v for v in shown if v.startswith("**Sources**"))
    assert "](javascript:" not in sources and "](data:" not in sources  # plain text, never a link
    assert "Page margins\\u202etxt.exe\\x1b\\[2J (evil\\x00id)" in sources
    assert not any(UNSAFE_CHARACTERS.search(v.replace("\n", "")) for v in shown)
    said = how_made(assistant).tabs[0].markdown[0].value
    assert "](https://evil.example" not in said  # a title in the plain words is text, never a link
    table = assistant.dataframe[0].value
    assert "Page margins\\u202etxt.exe\\x1b[2J" in list(table["Article"]) and "evil\\x00id" in list(table["Id"])


def test_an_impossible_budget_is_refused_on_the_tuning_page(kb_dir: Path) -> None:
    at = start("tuning")
    at.slider(key="set_trigger").set_value(50)
    at.slider(key="set_target").set_value(90)
    at.run()
    assert "budget_target_pct must not exceed budget_trigger_pct" in at.error[0].value


def test_history_stays_and_new_conversation_clears_it(kb_dir: Path) -> None:
    at = ask(start(), "How do I create a table of contents?")
    ask(at, "How do I print a brochure?")
    assert len(at.chat_message) == 4 and "Printing a Brochure" in at.chat_message[3].markdown[0].value
    at.button(key="new_conversation").click().run()
    assert len(at.chat_message) == 0


def test_filters_from_the_tuning_page_scope_the_chats_searches(kb_dir: Path) -> None:
    at = tune(start(), set_filters="kb_id=no-such-article")
    assert "Searches are filtered (Tuning page)." in [c.value for c in at.sidebar.caption]
    ask(at, "How do I create a table of contents?")
    assistant = at.chat_message[1]
    assert not any(f"“{TOC}”" in m.value for m in assistant.markdown)  # nothing matches the filter: no source
    at.switch_page("ragidx/dashboard/pages/tuning.py").run()
    at.text_area(key="set_filters").set_value("version>=").run()
    assert any("key=value" in e.value for e in at.error)  # a bad line says how to write one


# --- ingest ----------------------------------------------------------------------------------------
@pytest.fixture
def uploads_on(dashboard_env: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The dashboard over an empty data dir, configured to take uploads."""
    monkeypatch.setenv("RAGIDX_DASHBOARD__UPLOADS", "true")
    return dashboard_env


def upload(at: AppTest, *files: tuple[str, bytes]) -> AppTest:
    at.file_uploader(key="uploads").set_value([(name, data, "application/octet-stream") for name, data in files])
    at.run()
    at.button(key="ingest").click().run()
    assert not at.exception, at.exception
    return at


ARTICLE = {"id": "kb-1", "title": "Watering ferns", "url": "https://kb/ferns", "text": "Water ferns twice a week."}


def test_ingest_page_ingests_jsonl_and_markdown(uploads_on: Path) -> None:
    at = start("ingest")
    assert "0 articles" in at.sidebar.caption[0].value
    jsonl = (json.dumps(ARTICLE) + "\n").encode()
    upload(at, ("ferns.jsonl", jsonl), ("cacti.md", b"# Cacti\n\nWater cacti once a month.\n"))
    assert [s.value for s in at.success] == [
        "ferns.jsonl: 1 article read — 1 new, 0 changed, 0 unchanged; 1 chunk written",
        "cacti.md: 1 article read — 1 new, 0 changed, 0 unchanged; 1 chunk written",
    ]
    assert "2 articles" in at.sidebar.caption[0].value
    at.switch_page("ragidx/dashboard/pages/chat.py").run()  # the chat page now answers from the upload
    ask(at, "How often should I water ferns?")
    assert "“Watering ferns” [1]" in at.chat_message[1].markdown[0].value


def test_a_russian_upload_on_an_english_only_model_says_what_to_use(uploads_on: Path) -> None:
    article = {
        "id": "ru-1",
        "title": "Полив папоротников",
        "url": "https://kb/ru",
        "text": "Поливайте папоротники дважды в неделю.",
    }
    at = upload(start("ingest"), ("ferns_ru.jsonl", (json.dumps(article, ensure_ascii=False) + "\n").encode()))
    assert at.success[0].value.startswith("ferns_ru.jsonl: 1 article read — 1 new")
    assert len(at.warning) == 1 and "does not read (ru: 1" in at.warning[0].value
    assert "RAGIDX_EMBED_MODEL=e5-multilingual" in at.warning[0].value


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("empty.jsonl", b"", "empty.jsonl is empty: there is nothing to ingest"),
        ("notes.md", b"  \n", "notes.md is empty"),
        ("table.csv", b"id,text\n1,hello\n", "table.csv: unsupported file type '.csv'"),
        ("slides.pptx", b"PK\x03\x04", "slides.pptx: unsupported file type '.pptx'"),
        ("kb.pdf", b"%PDF-1.4", "kb.pdf: no article could be read (kb.pdf: not a readable PDF"),
        (
            "broken.jsonl",
            b"{not json\n[1, 2]\n",
            "broken.jsonl: no article could be read (broken.jsonl:1: invalid JSON",
        ),
    ],
)
def test_bad_uploads_show_a_clear_message(uploads_on: Path, name: str, data: bytes, message: str) -> None:
    at = upload(start("ingest"), (name, data))
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and errors[0].startswith(message), errors
    assert "Upload a .jsonl file" in errors[0] and "PDF, Word .docx, HTML, Markdown, text (.docx," in errors[0]
    assert not at.success


def test_bad_lines_are_listed_and_the_good_ones_ingested(uploads_on: Path) -> None:
    data = (json.dumps(ARTICLE) + "\n{broken\n" + json.dumps({"id": "x", "text": ""}) + "\n").encode()
    at = upload(start("ingest"), ("mixed.jsonl", data))
    assert at.success[0].value.startswith("mixed.jsonl: 1 article read — 1 new") and "2 skipped" in at.success[0].value
    skipped = at.expander[0]
    assert skipped.label == "mixed.jsonl: 2 lines skipped"
    assert "mixed.jsonl:2: invalid JSON" in skipped.code[0].value and "mixed.jsonl:3:" in skipped.code[0].value


def test_uploads_are_off_unless_configured_and_the_page_says_how_to_add_files(dashboard_env: Path) -> None:
    at = start("ingest")
    assert not at.get("file_uploader") and not at.button  # nothing to write with
    help_text = at.info[0].value
    assert "Uploads are **off**" in help_text and "ragidx ingest FILE_OR_FOLDER" in help_text
    assert "`uploads = true` under `[dashboard]`" in help_text and "RAGIDX_DASHBOARD__UPLOADS=true" in help_text


def test_an_upload_never_replaces_a_restricted_article_or_one_of_another_source(uploads_on: Path) -> None:
    """A JSONL line with the id of a ``group:hr`` article used to replace it, drop its restriction and publish its
    text; one with the id of an article of another file replaced that file's article."""
    from ragidx.article import Article
    from ragidx.config import Settings
    from ragidx.stores.access import Principal
    from tests.dashboard.fakes import make_engine

    salaries = Article(
        "hr-1", "Salaries", "https://hr/1", "Salary bands are confidential.", metadata={"allowed": ["group:hr"]}
    )
    ferns = Article("faq-1", "Watering ferns", "https://faq/1", "Water ferns twice a week.")
    with make_engine(Settings(data_dir=uploads_on)) as engine:
        assert engine.ingest([salaries], source_name="hr-export").new == 1
        assert engine.ingest([ferns], source_name="faq.jsonl").new == 1
    lines = [
        {"id": "hr-1", "title": "Salaries", "url": "https://x", "text": "Salary bands: everyone earns 1 EUR."},
        {"id": "faq-1", "title": "Ferns", "url": "https://x", "text": "Never water ferns."},
        {"id": "new-1", "title": "Cacti", "url": "https://kb/cacti", "text": "Water cacti once a month."},
    ]
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    at = upload(start("ingest"), ("faq.jsonl", data))
    assert at.success[0].value.startswith("faq.jsonl: 2 articles read — 1 new, 0 changed")
    assert "2 skipped" in at.success[0].value
    skipped = at.expander[0].code[0].value
    assert "'hr-1' is already in the knowledge base from another source, or is not public" in skipped
    assert "'faq-1' is already in the knowledge base" in skipped and "Salary bands are" not in skipped
    with make_engine(Settings(data_dir=uploads_on)) as engine:
        stored = engine.article_store.get(["hr-1", "faq-1", "new-1"])
        assert stored["hr-1"].content == "Salary bands are confidential." and stored["faq-1"].content == ferns.content
        assert not engine.article_store.get(["hr-1"], principal=Principal())  # still restricted
        assert stored["new-1"].content == "Water cacti once a month."


# --- evaluation ------------------------------------------------------------------------------------
def test_evaluation_page_plots_every_stage(dashboard_env: Path, beir_folder: Path) -> None:
    at = start("evaluation")
    at.text_input(key="beir_folder").set_value(str(beir_folder))
    at.number_input(key="eval_depth").set_value(10)
    at.button(key="run_eval").click().run()
    assert not at.exception and not at.error, at.error
    table = at.dataframe[0].value
    assert list(table["stage"]) == [
        "dense",
        "bm25",
        "hybrid",
        "hybrid+rerank",
        "full_chain",
        "untuned",
        "tuned",
    ]
    assert {"ndcg@10", "recall@10", "recall@100", "mrr@10", "p50_ms", "p95_ms"} <= set(table.columns)
    assert table["recall@10"].max() > 0  # the titles find their own articles
    quality, latency = charts(at)
    assert {r["stage"] for r in quality["data"]["values"]} == set(table["stage"])
    assert {r["metric"] for r in quality["data"]["values"]} == {"ndcg@10", "recall@10", "recall@100", "mrr@10"}
    assert {r["metric"] for r in latency["data"]["values"]} == {"p50_ms", "p95_ms"}
    assert "beir_writer: 3 queries, 26 articles" in at.caption[0].value


def test_evaluation_page_says_what_a_beir_folder_needs(dashboard_env: Path, tmp_path: Path) -> None:
    at = start("evaluation")
    at.text_input(key="beir_folder").set_value(str(tmp_path))
    at.button(key="run_eval").click().run()
    assert "is not a BEIR folder: missing corpus.jsonl, queries.jsonl, qrels/test.tsv" in at.error[0].value
    assert not at.dataframe


def test_evaluation_page_asks_a_question_set(kb_dir: Path, tmp_path: Path) -> None:
    questions = tmp_path / "q.jsonl"
    questions.write_text(
        json.dumps({"id": "toc", "question": "How do I create a table of contents?", "answers": ["Table of Contents"]})
        + "\n",
        encoding="utf-8",
    )
    at = start("evaluation")
    at.text_input(key="answers_file").set_value(str(questions))
    at.button(key="run_answers").click().run()
    assert not at.exception and not at.error, at.error
    assert {m.label: m.value for m in at.metric}["Right answers"] == "1.0"
    table = at.dataframe[0].value
    assert list(table["id"]) == ["toc"] and bool(table["right"][0]) and "Table of Contents" in table["answer"][0]


def test_evaluation_page_says_what_is_wrong_with_a_questions_file(dashboard_env: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{oops\n", encoding="utf-8")
    at = start("evaluation")
    at.text_input(key="answers_file").set_value(str(bad))
    at.button(key="run_answers").click().run()
    assert "bad.jsonl:1: not JSON" in at.error[0].value and not at.dataframe
