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


def start(page: str | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    assert not at.exception, at.exception
    if page:
        at.switch_page(f"ragidx/dashboard/pages/{page}.py").run()
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


# --- chat ------------------------------------------------------------------------------------------
def test_chat_answer_shows_citations_ranked_articles_and_the_budget(kb_dir: Path) -> None:
    at = ask(start(), "How do I create a table of contents?")
    user, assistant = at.chat_message
    assert user.markdown[0].value == "How do I create a table of contents?"
    text = assistant.markdown[0].value
    assert f"“{TOC}” [1]" in text
    sources = next(m.value for m in assistant.markdown if m.value.startswith("**Sources**"))
    assert f"[1] [{TOC}](https://help.libreoffice.org/" in sources

    table = assistant.dataframe[0].value
    assert list(table.columns) == ["#", "title", "rerank_score", "normalized_rank", "cited", "kb_id"]
    assert table["title"].iloc[0] == TOC and table["cited"].iloc[0] == "[1]"
    assert table["normalized_rank"].iloc[0] == 0.0 and table["normalized_rank"].iloc[-1] == 1.0
    assert list(table["rerank_score"]) == sorted(table["rerank_score"], reverse=True)

    shown = metrics(at)
    assert shown["Compressor"] == "extractive" and shown["Window (tokens)"] == "8,192"
    assert any(m.value == "**Path:** under_trigger" for m in assistant.markdown)
    gauge = charts(at)[0]
    lines = {row["line"]: row["tokens"] for row in gauge["layer"][1]["data"]["values"]}
    assert lines["window"] == 8192 and lines["target"] < lines["trigger"] < lines["hard limit"] < 8192
    assert "Model scripted" in assistant.caption[-1].value
    # the guard profile of the sidebar's (local) model, under the answer
    assert "Guards: small-model · none fired" in [c.value for c in assistant.caption]


def test_a_2k_window_from_the_sidebar_compresses_articles(kb_dir: Path) -> None:
    """The local model reads articles as plain text (cheaper than their JSON, and counted as sent): at 2K
    they fit under the default trigger, so the sidebar lowers it too."""
    at = start()
    at.sidebar.selectbox(key="set_window").set_value(2048)
    at.sidebar.number_input(key="set_top_k").set_value(10)
    at.sidebar.slider(key="set_trigger").set_value(50)
    at.sidebar.slider(key="set_target").set_value(45)
    ask(at.run(), "How do I create, edit and format a table of contents or an index?")
    assert metrics(at)["Window (tokens)"] == "2,048"
    path = next(m.value for m in at.chat_message[1].markdown if m.value.startswith("**Path:**"))
    assert "compressed" in path or "dropped" in path or "truncated" in path
    gauge, tokens = charts(at)
    assert gauge["layer"][0]["encoding"]["x"]["scale"]["domain"][1] >= 2048
    rows = tokens["data"]["values"]
    before = {r["article"]: r["tokens"] for r in rows if r["stage"] == "before"}
    after = {r["article"]: r["tokens"] for r in rows if r["stage"] == "after"}
    assert len(before) >= 3 and sum(after.values()) < sum(before.values())
    sent = next(r["tokens"] for r in gauge["layer"][0]["data"]["values"] if r["part"] == "prompt sent")
    hard = next(r["tokens"] for r in gauge["layer"][1]["data"]["values"] if r["line"] == "hard limit")
    assert sent <= hard < 2048


def test_an_empty_knowledge_base_answers_not_found_without_citations(dashboard_env: Path) -> None:
    at = start()
    assert "The knowledge base is empty" in at.sidebar.info[0].value
    ask(at, "What is the boiling point of tungsten?")
    assistant = at.chat_message[1]
    assert "could not find" in assistant.markdown[0].value
    assert any("Not found in the knowledge base" in i.value for i in assistant.info)
    assert any("Why: the search found no article." in i.value for i in assistant.info)
    assert not any(m.value.startswith("**Sources**") for m in assistant.markdown)
    assert "No article was retrieved." in [c.value for c in assistant.caption]


def test_a_window_too_small_shows_the_engines_reason(kb_dir: Path) -> None:
    at = start()
    at.sidebar.selectbox(key="set_window").set_value(2048)
    at.sidebar.number_input(key="set_max_out").set_value(2000)
    ask(at.run(), "How do I create a table of contents?")
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
    ]
    with make_engine(Settings(data_dir=dashboard_env)) as engine:
        assert engine.ingest(evil).new == 2
    monkeypatch.setenv("RAGIDX_BUDGET_RELEVANCE_FLOOR", "0")  # both articles reach the model, both are cited
    at = ask(start(), "How do I set page margins?")
    assistant = at.chat_message[1]
    shown = [m.value for m in assistant.markdown] + [c.value for c in assistant.caption]
    sources = next(v for v in shown if v.startswith("**Sources**"))
    assert "](javascript:" not in sources and "](data:" not in sources  # plain text, never a link
    assert "Page margins\\u202etxt.exe\\x1b\\[2J (evil\\x00id)" in sources
    assert not any(UNSAFE_CHARACTERS.search(v.replace("\n", "")) for v in shown)
    table = assistant.dataframe[0].value
    assert "Page margins\\u202etxt.exe\\x1b[2J" in list(table["title"]) and "evil\\x00id" in list(table["kb_id"])


def test_an_impossible_budget_is_refused_in_the_sidebar(kb_dir: Path) -> None:
    at = start()
    at.sidebar.slider(key="set_trigger").set_value(50)
    at.sidebar.slider(key="set_target").set_value(90)
    at.run()
    assert "budget_target_pct must not exceed budget_trigger_pct" in at.sidebar.error[0].value


def test_history_stays_and_new_conversation_clears_it(kb_dir: Path) -> None:
    at = ask(start(), "How do I create a table of contents?")
    ask(at, "How do I print a brochure?")
    assert len(at.chat_message) == 4 and "Printing a Brochure" in at.chat_message[3].markdown[0].value
    at.button(key="new_conversation").click().run()
    assert len(at.chat_message) == 0


# --- ingest ----------------------------------------------------------------------------------------
def upload(at: AppTest, *files: tuple[str, bytes]) -> AppTest:
    at.file_uploader(key="uploads").set_value([(name, data, "application/octet-stream") for name, data in files])
    at.run()
    at.button(key="ingest").click().run()
    assert not at.exception, at.exception
    return at


ARTICLE = {"id": "kb-1", "title": "Watering ferns", "url": "https://kb/ferns", "text": "Water ferns twice a week."}


def test_ingest_page_ingests_jsonl_and_markdown(dashboard_env: Path) -> None:
    at = start("ingest")
    assert "0 articles" in at.sidebar.caption[-1].value
    jsonl = (json.dumps(ARTICLE) + "\n").encode()
    upload(at, ("ferns.jsonl", jsonl), ("cacti.md", b"# Cacti\n\nWater cacti once a month.\n"))
    assert [s.value for s in at.success] == [
        "ferns.jsonl: 1 articles read — 1 new, 0 changed, 0 unchanged; 1 chunks written",
        "cacti.md: 1 articles read — 1 new, 0 changed, 0 unchanged; 1 chunks written",
    ]
    assert "2 articles" in at.sidebar.caption[-1].value
    at.switch_page("ragidx/dashboard/pages/chat.py").run()  # the chat page now answers from the upload
    ask(at, "How often should I water ferns?")
    assert "“Watering ferns” [1]" in at.chat_message[1].markdown[0].value


def test_a_russian_upload_on_an_english_only_model_says_what_to_use(dashboard_env: Path) -> None:
    article = {
        "id": "ru-1",
        "title": "Полив папоротников",
        "url": "https://kb/ru",
        "text": "Поливайте папоротники дважды в неделю.",
    }
    at = upload(start("ingest"), ("ferns_ru.jsonl", (json.dumps(article, ensure_ascii=False) + "\n").encode()))
    assert at.success[0].value.startswith("ferns_ru.jsonl: 1 articles read — 1 new")
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
def test_bad_uploads_show_a_clear_message(dashboard_env: Path, name: str, data: bytes, message: str) -> None:
    at = upload(start("ingest"), (name, data))
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and errors[0].startswith(message), errors
    assert "Upload a .jsonl file" in errors[0] and "a PDF, a Word .docx file" in errors[0]
    assert not at.success


def test_bad_lines_are_listed_and_the_good_ones_ingested(dashboard_env: Path) -> None:
    data = (json.dumps(ARTICLE) + "\n{broken\n" + json.dumps({"id": "x", "text": ""}) + "\n").encode()
    at = upload(start("ingest"), ("mixed.jsonl", data))
    assert at.success[0].value.startswith("mixed.jsonl: 1 articles read — 1 new") and "2 skipped" in at.success[0].value
    skipped = at.expander[0]
    assert skipped.label == "mixed.jsonl: 2 lines skipped"
    assert "mixed.jsonl:2: invalid JSON" in skipped.code[0].value and "mixed.jsonl:3:" in skipped.code[0].value


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


def test_sidebar_filters_scope_the_chats_searches(kb_dir: Path) -> None:
    at = start()
    at.text_area(key="set_filters").set_value("kb_id=no-such-article").run()
    assert not at.exception, at.exception
    ask(at, "How do I create a table of contents?")
    assistant = at.chat_message[1]
    assert not any(f"“{TOC}”" in m.value for m in assistant.markdown)  # nothing matches the filter: no source
    at.text_area(key="set_filters").set_value("version>=").run()
    assert any("key=value" in e.value for e in at.sidebar.error)  # a bad line says how to write one
