"""``ragidx ask`` and the MCP ``ask`` tool log their turns (surfaces ``cli`` and ``mcp``) like ``ragidx serve`` and
the dashboard, and log nothing with ``questions.enabled = false``. Real stores, agent and question log; hash
embeddings and a scripted chat model (tests.dashboard.fakes)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp.client import Client

from ragidx.cli import main
from ragidx.config import Settings
from ragidx.engine import Engine
from ragidx.integrations.mcp_server import build_server
from ragidx.questions.recorder import recorder_for
from ragidx.questions.records import QuestionRecord
from ragidx.questions.settings import QuestionLogSettings
from ragidx.stores.access import Principal
from tests.dashboard.fakes import make_engine

QUESTION = "How do I create a table of contents?"


@pytest.fixture(scope="module")
def kb(writer_kb_file: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    data_dir = tmp_path_factory.mktemp("surfaces-kb")
    with make_engine(settings(data_dir)) as engine:
        engine.ingest(Path(writer_kb_file), source_name="kb")
    return data_dir


def settings(data_dir: Path, *, logged: bool = True) -> Settings:
    return Settings(
        data_dir=data_dir, top_k=4, max_tool_rounds=1, plan_searches="never",
        questions=QuestionLogSettings(enabled=logged),
    )  # fmt: skip


def logged(data_dir: Path) -> list[QuestionRecord]:
    with make_engine(settings(data_dir)) as engine:
        log = recorder_for(engine).log
        assert log is not None
        return log.records()


@pytest.fixture
def cli(kb: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setattr("ragidx.engine.Engine", make_engine)
    for var in ("RAGIDX_TOP_K=4", "RAGIDX_MAX_TOOL_ROUNDS=1", "RAGIDX_PLAN_SEARCHES=never"):
        monkeypatch.setenv(*var.split("="))
    yield kb


def test_ragidx_ask_logs_its_turn_as_cli_streamed_or_whole_unless_the_log_is_off(
    cli: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    before = {r.id for r in logged(cli)}
    assert main(["--data-dir", str(cli), "ask", QUESTION, "--json", "--user", "ann", "--group", "hr"]) == 0
    question_id = json.loads(capsys.readouterr().out)["question_id"]  # the id the log gave it, for feedback
    assert main(["--data-dir", str(cli), "ask", QUESTION, "--quiet"]) == 0
    assert "Sources:" in capsys.readouterr().out
    new = [r for r in logged(cli) if r.id not in before]
    assert len(new) == 2 and {r.surface for r in new} == {"cli"} and question_id in {r.id for r in new}
    whole = next(r for r in new if r.id == question_id)
    assert (whole.question, whole.reader, whole.groups, whole.outcome) == (QUESTION, "user:ann", ("hr",), "answered")
    assert whole.articles and any(a.cited for a in whole.articles)

    monkeypatch.setenv("RAGIDX_QUESTIONS__ENABLED", "false")  # the log's off switch
    assert main(["--data-dir", str(cli), "ask", QUESTION, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["question_id"] is None
    monkeypatch.delenv("RAGIDX_QUESTIONS__ENABLED")
    assert len(logged(cli)) == len(before) + 2


def ask_over_mcp(engine: Engine, reader: Principal) -> None:
    server = build_server(engine, reader=lambda ctx: reader)

    async def run() -> None:
        async with Client(server) as client:
            result = await client.call_tool("ask", {"question": QUESTION})
            assert not result.is_error

    asyncio.run(run())


def test_the_mcp_ask_tool_logs_its_turn_as_mcp_as_its_reader_unless_the_log_is_off(kb: Path) -> None:
    before = {r.id for r in logged(kb)}
    with make_engine(settings(kb)) as engine:
        ask_over_mcp(engine, Principal.of("bob", ["ops"]))
    new = [r for r in logged(kb) if r.id not in before]
    assert [(r.surface, r.question, r.reader, r.groups, r.outcome) for r in new] == [
        ("mcp", QUESTION, "user:bob", ("ops",), "answered")
    ]
    with make_engine(settings(kb, logged=False)) as engine:
        ask_over_mcp(engine, Principal.of("bob", ["ops"]))
    assert len(logged(kb)) == len(before) + 1
