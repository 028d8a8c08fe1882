"""ragidx's context budget inside LlamaIndex's own FunctionAgent: every call fits the window."""

from __future__ import annotations

import asyncio
import json
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
from ragidx.tools.retrieve_context import make_retrieve_context_tool
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
    # A tool without the retrieval cap (the engine's own caps the searches: see below), so that every search
    # returns top_k articles and the material to budget piles up.
    uncapped = make_retrieve_context_tool(engine.retriever)
    agent = FunctionAgent(tools=[uncapped], llm=llm, system_prompt="Answer from the docs.")

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


# --- the fallback model and the retrieval cap, on a 4K window --------------------------------------------
FALLBACK_WINDOW = 32_768


def _articles(call: Any) -> int:
    return len(json.loads(call.tool_output.content)["articles"])


def test_a_call_the_budget_says_needs_a_larger_window_goes_to_the_fallback(engine: Engine) -> None:
    # One script, whichever model is asked: the agent's run is the same, only who answers each call differs.
    steps = iter([*(ToolCall("retrieve_context", {"query": q}) for q in QUERIES), "Done [1]."])
    inner = ScriptedLLM([lambda messages, call: next(steps)], cycle=True)
    inner.context_window, inner.num_output = WINDOW, MAX_OUT
    large = ScriptedLLM([lambda messages, call: next(steps)], cycle=True)
    large.context_window, large.num_output = FALLBACK_WINDOW, MAX_OUT
    llm = engine.budgeted_llm(inner, fallback_llm=large)
    uncapped = make_retrieve_context_tool(engine.retriever)  # every search returns top_k: the material piles up
    agent = FunctionAgent(tools=[uncapped], llm=llm, system_prompt="Answer from the docs.")

    result = _run(agent, "How do I make a table of contents, print a brochure and number pages?")

    assert str(result) == "Done [1]." and len(result.tool_calls) == len(QUERIES)  # tool calls read on both models
    assert len(llm.routes) == len(llm.reports) == len(inner.calls) + len(large.calls) == len(QUERIES) + 1
    switched = [i for i, r in enumerate(llm.routes) if r is not None]
    assert switched and len(large.calls) == len(switched) and llm.routes[0] is None
    assert all(f"{FALLBACK_WINDOW}-token window" in (llm.routes[i] or "") for i in switched)
    # the fallback's calls are budgeted for its own window: more of the articles reach it than 4K could hold
    last = llm.reports[-1]
    assert switched[-1] == len(llm.routes) - 1 and last.context_window == FALLBACK_WINDOW
    assert last.tokens_after > WINDOW


def test_the_budget_caps_the_next_search_of_the_engines_tool_on_a_4k_window(engine: Engine) -> None:
    inner = _scripted()
    llm = engine.budgeted_llm(inner)
    tool = engine.retrieve_context_tool()
    agent = FunctionAgent(tools=[tool], llm=llm, system_prompt="Answer from the docs.")

    result = _run(agent, "How do I make a table of contents, print a brochure and number pages?")

    caps = [r.article_cap for r in llm.reports]
    top_k = engine.settings.top_k
    assert any(c is not None and c < top_k for c in caps)  # the 4K window had room for fewer than top_k
    for call, cap in zip(result.tool_calls, caps, strict=False):  # search i follows LLM call i
        assert _articles(call) <= (cap or top_k)
    assert engine.retrieval_cap.get() == caps[-1]


def test_without_the_budget_the_tool_returns_top_k(engine: Engine) -> None:
    engine.retrieval_cap.set(None)
    output = engine.retrieve_context_tool().call(query="table of contents")
    assert len(json.loads(output.content)["articles"]) == engine.settings.top_k
