"""ragidx's context budget inside LlamaIndex's own FunctionAgent: every call fits the window."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole

from ragidx.agent.budgeted_llm import BudgetedLLM
from ragidx.budget import ContextBudget
from ragidx.budget.report import ContextWindowTooSmallError
from ragidx.engine import Engine
from ragidx.providers.tokenizer import TokenCounter
from tests.agent.llamaindex_helpers import writer_engine
from tests.fakes.scripted_llm import ScriptedLLM, ToolCall, text_of

WINDOW, MAX_OUT = 4096, 256
QUERIES = ("create a table of contents", "print a brochure", "insert page numbers", "table of contents")


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory, writer_kb_file: str) -> Iterator[Engine]:
    yield from writer_engine(tmp_path_factory.mktemp("budgeted-llm"), writer_kb_file)


def _scripted() -> ScriptedLLM:
    llm = ScriptedLLM([*(ToolCall("retrieve_context", {"query": q}) for q in QUERIES), "Done [1]."])
    llm.context_window, llm.num_output = WINDOW, MAX_OUT
    return llm


def _run(agent: FunctionAgent, question: str) -> Any:
    async def go() -> Any:
        return await agent.run(user_msg=question)

    return asyncio.run(go())


def test_every_call_of_a_function_agent_fits_the_window(engine: Engine) -> None:
    inner = _scripted()
    llm = engine.budgeted_llm(inner)
    agent = FunctionAgent(tools=[engine.retrieve_context_tool()], llm=llm, system_prompt="Answer from the docs.")

    result = _run(agent, "How do I make a table of contents, print a brochure and number pages?")

    assert str(result) == "Done [1]." and len(result.tool_calls) == len(QUERIES)
    assert len(inner.calls) == len(QUERIES) + 1 == len(llm.reports)
    counter = TokenCounter()
    raw = sum(counter.count(c.tool_output.content) for c in result.tool_calls)
    assert raw > 2 * WINDOW  # unbudgeted, the last call would have sent several windows of articles
    for call, report in zip(inner.calls, llm.reports, strict=True):
        sent = sum(counter.count(text_of(m)) for m in call.messages)
        assert sent <= report.tokens_after <= report.hard_limit_tokens < WINDOW - MAX_OUT  # never an overflow
        assert call.messages[0].role == MessageRole.SYSTEM and "Answer from the docs." in text_of(call.messages[0])
    last = llm.reports[-1]
    assert last.article_tokens_after < last.article_tokens_before  # compressed, in proportion to rank
    repeated = [a for a in last.articles if "Table of Contents" in a.title]
    shown = [a.kb_id for a in repeated if a.tokens_after > 0]
    assert shown and len(shown) == len(set(shown))  # found by two searches, sent once
    assert "reference" in {a.status for a in repeated}
    assert sum(a.tokens_after > 0 for a in last.articles) >= 3  # the best articles of all searches reach the model


def test_a_window_too_small_for_the_fixed_prompt_is_a_clear_error(engine: Engine) -> None:
    inner = _scripted()
    llm = BudgetedLLM(inner, ContextBudget(), context_window=600, max_output_tokens=256)
    with pytest.raises(ContextWindowTooSmallError):
        llm.chat([ChatMessage(role=MessageRole.SYSTEM, content="x " * 900), ChatMessage(role="user", content="hi")])
    assert inner.calls == []  # nothing was sent


def test_plain_chat_and_completion_are_budgeted_too() -> None:
    inner = ScriptedLLM(["ok", "fine"])
    inner.context_window, inner.num_output = WINDOW, MAX_OUT
    llm = BudgetedLLM(inner, ContextBudget())
    assert llm.metadata.context_window == WINDOW and llm.metadata.is_function_calling_model
    assert llm.chat([ChatMessage(role="user", content="hello")]).message.content == "ok"
    assert llm.complete("hello there").text == "fine"
    assert len(llm.reports) == 2 and all(r.tokens_after <= r.hard_limit_tokens for r in llm.reports)
