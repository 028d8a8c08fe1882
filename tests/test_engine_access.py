"""Filters and permissions through every Engine surface, on real stores with a scripted model: what a principal
may not read is never returned, shown to the model, cited, logged or kept in another reader's session; a changed
ACL takes effect on re-ingest without embedding anything."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragidx.article import Article
from ragidx.config import Settings
from ragidx.engine import Engine
from ragidx.stores.filters import parse_filters
from tests.dashboard.fakes import make_engine

PAYROLL = "Printing payroll slips"
KB = [
    Article(
        "pub-labels",
        "Printing labels",
        "u1",
        "To print labels choose File New Labels and print them.",
        "en",
        {"product": "writer", "version": 7},
    ),
    Article(
        "pub-calc",
        "Printing in Calc",
        "u2",
        "To print a spreadsheet choose File Print and set print ranges.",
        "en",
        {"product": "calc", "version": 8},
    ),
    Article(
        "hr-payroll",
        PAYROLL,
        "u3",
        "Payroll slips print from the HR portal; print payroll slips monthly.",
        "en",
        {"product": "writer", "version": 7, "allowed": ["group:hr"]},
    ),
    Article(
        "ann-notes",
        "Ann's printer notes",
        "u4",
        "My printer prints labels duplex; print labels on floor 3.",
        "en",
        {"product": "writer", "allowed": ["user:ann"]},
    ),
]
RESTRICTED = {"hr-payroll", "ann-notes"}


@pytest.fixture()
def engine(tmp_path: Path) -> Iterator[Engine]:
    with make_engine(Settings(data_dir=tmp_path, max_tool_rounds=1, plan_searches="never")) as eng:
        report = eng.ingest(KB, source_name="kb")
        assert report.new == 4 and not report.errors
        yield eng


def kb_ids(articles: list[Article]) -> set[str]:
    return {a.kb_id for a in articles}


def test_retrieve_runs_as_a_principal_and_filters_before_top_k(engine: Engine) -> None:
    assert kb_ids(engine.retrieve("print payroll slips", top_k=4)) == {"pub-labels", "pub-calc"}
    assert "hr-payroll" in kb_ids(engine.retrieve("print payroll slips", top_k=4, groups=["hr"]))
    assert kb_ids(engine.retrieve("print labels", top_k=4, user="ann")) == {"pub-labels", "pub-calc", "ann-notes"}
    # A narrow filter still returns its best: one article matches, one comes back.
    assert kb_ids(engine.retrieve("print payroll", top_k=1, filters={"product": "calc"})) == {"pub-calc"}
    ranged = parse_filters(["version>=7", "product in writer,calc"])
    assert kb_ids(engine.retrieve("print", top_k=4, filters=ranged, groups=["hr"])) == {
        "pub-labels",
        "pub-calc",
        "hr-payroll",
    }


def test_a_public_question_never_shows_cites_or_logs_a_restricted_article(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    answer = engine.ask("How are payroll slips printed?")
    shown = {a["kb_id"] for a in answer.articles}
    assert shown and not shown & RESTRICTED
    assert not {c.kb_id for c in answer.citations} & RESTRICTED
    assert PAYROLL not in answer.text
    logged = caplog.text
    assert "hr-payroll" not in logged and PAYROLL not in logged and "ann-notes" not in logged
    # The same question from HR finds and cites the payroll article.
    hr = engine.ask("How are payroll slips printed?", groups=["hr"])
    assert "hr-payroll" in {c.kb_id for c in hr.citations}


def test_every_llamaindex_surface_is_scoped(engine: Engine) -> None:
    nodes = engine.as_retriever(top_k=4).retrieve("print payroll slips")
    assert {n.node.metadata["kb_id"] for n in nodes} == {"pub-labels", "pub-calc"}
    nodes = engine.as_retriever(top_k=4, groups=["hr"], filters={"product": "writer"}).retrieve("payroll slips")
    assert {n.node.metadata["kb_id"] for n in nodes} == {"pub-labels", "hr-payroll"}
    response = engine.as_query_engine().query("How are payroll slips printed?")
    assert not {n.node.metadata["kb_id"] for n in response.source_nodes} & RESTRICTED
    response = engine.as_query_engine(groups=["hr"]).query("How are payroll slips printed?")
    assert "hr-payroll" in {n.node.metadata["kb_id"] for n in response.source_nodes}
    chat = engine.as_chat_engine(user="ann")
    reply = chat.chat("Where are my printer notes on printing labels?")
    assert not {n.node.metadata["kb_id"] for n in reply.source_nodes} & {"hr-payroll"}
    streamed = list(engine.stream_ask("How are payroll slips printed?", filters={"product": "calc"}))
    final = streamed[-1]
    assert {a["kb_id"] for a in final.articles} <= {"pub-calc"}
    tool = engine.retrieve_context_tool(user="ann")
    content = tool.call(query="print payroll slips labels", top_k=4).content
    assert "ann-notes" in content and "hr-payroll" not in content
    assert "hr-payroll" not in engine.retrieve_context_tool().call(query="payroll slips").content
    asyncio.run(_async_surfaces(engine))


async def _async_surfaces(engine: Engine) -> None:
    got = await engine.aretrieve("payroll slips", top_k=4)
    assert not kb_ids(got) & RESTRICTED
    answer = await engine.aask("How are payroll slips printed?", groups=["hr"])
    assert "hr-payroll" in {a["kb_id"] for a in answer.articles}


def test_a_session_belongs_to_its_first_reader(engine: Engine) -> None:
    engine.ask("How are payroll slips printed?", session_id="s1", groups=["hr"])
    with pytest.raises(PermissionError, match="another reader"):
        engine.ask("And how often?", session_id="s1")
    engine.ask("And how often?", session_id="s1", groups=["hr"])  # the same reader goes on


def test_changed_principals_take_effect_on_reingest_without_embedding(engine: Engine) -> None:
    embed = engine.embed_model
    before = embed.calls
    opened = [
        a
        if a.kb_id != "hr-payroll"
        else Article(a.kb_id, a.title, a.url, a.content, a.language, {"product": "writer", "version": 7})
        for a in KB
    ]
    report = engine.ingest(opened, source_name="kb")
    assert report.widening_refused == ["hr-payroll"] and report.relabeled == 0  # opening one up is deliberate
    report = engine.ingest(opened, source_name="kb", allow_widening=True)
    assert report.widened == ["hr-payroll"]
    assert report.relabeled == 1 and report.changed == 0 and report.chunks_written == 0
    assert embed.calls == before  # nothing embedded again
    assert "hr-payroll" in kb_ids(engine.retrieve("print payroll slips", top_k=4))  # public now
    closed = [a if a.kb_id != "pub-calc" else a.with_metadata(allowed=["group:finance"]) for a in opened]
    report = engine.ingest(closed, source_name="kb")
    assert report.relabeled == 1 and embed.calls == before
    assert "pub-calc" not in kb_ids(engine.retrieve("print a spreadsheet", top_k=4))
    assert "pub-calc" not in engine.article_store.get(["pub-calc"], principal=engine_principal())
    assert "pub-calc" in kb_ids(engine.retrieve("print a spreadsheet", top_k=4, groups=["finance"]))


def engine_principal():  # type: ignore[no-untyped-def]
    from ragidx.stores.access import Principal

    return Principal()


def test_a_bad_allowed_value_skips_the_article_instead_of_making_it_public(engine: Engine) -> None:
    bad = Article("bad", "Bad ACL", "u5", "print secrets", "en", {"allowed": ["ann"]})
    report = engine.ingest([bad], source_name="other")
    assert report.errors and "user:NAME" in report.errors[0] and report.new == 0
    assert "bad" not in kb_ids(engine.retrieve("print secrets", top_k=4))


def test_check_filters_refuses_what_a_search_would_without_searching(engine: Engine) -> None:
    engine.check_filters(None)
    engine.check_filters({"product": "writer", "version": [7, 8]})
    with pytest.raises(ValueError, match="cannot filter on 'nope': no article carries it; filterable fields are"):
        engine.check_filters({"nope": 1})
    with pytest.raises(ValueError, match="'abc' is not a number"):
        engine.check_filters(parse_filters(["version>=abc"]))


def test_a_principal_or_filters_that_are_not_one_are_refused_when_asked_not_when_read(engine: Engine) -> None:
    # Every surface reads its filters and principal (one Scope) as it is called: the error comes at once, before the
    # question waits for the model, also from the streaming forms, whose items nobody has read yet.
    with pytest.raises(ValueError, match="not one string"):
        engine.stream_ask("How are payroll slips printed?", groups="hr")
    with pytest.raises(ValueError, match="not one string"):
        engine.astream_ask("How are payroll slips printed?", groups="hr")
    with pytest.raises(TypeError, match="filters must be"):
        engine.as_query_engine(filters="product=writer")  # type: ignore[arg-type]
    assert engine.model_queue.stats().waiting == 0 and engine.model_queue.stats().busy == 0
