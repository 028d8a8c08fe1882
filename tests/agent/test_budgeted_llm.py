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
from ragidx.budget import ContextBudget, PromptAccountant
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


# --- context that arrives in the prompt (LlamaIndex's synthesizers and chat engines) ------------------------
ANSWER = "Press Ctrl+F12 to insert a table."


def _context(tokens: int) -> str:
    from tests.budget.helpers import text_of_tokens

    body = text_of_tokens(tokens, seed=3)
    half = len(body) // 2
    return body[:half] + " " + ANSWER + " " + body[half:]


def _inner(window: int = 2048) -> ScriptedLLM:
    inner = ScriptedLLM(["ok"], cycle=True)
    inner.context_window, inner.num_output = window, MAX_OUT
    return inner


def test_context_stuffed_into_a_qa_prompt_is_compressed_guided_by_the_question_not_refused() -> None:
    from llama_index.core.prompts.chat_prompts import CHAT_TEXT_QA_PROMPT

    inner = _inner()
    llm = BudgetedLLM(inner, ContextBudget())
    messages = CHAT_TEXT_QA_PROMPT.format_messages(context_str=_context(5000), query_str="Which key inserts a table?")

    assert llm.chat(messages).message.content == "ok"

    (report,) = llm.reports
    sent = inner.calls[0].messages
    assert report.tokens_before > 5000 and "compressed" in report.path
    assert PromptAccountant().count_prompt(sent) == report.tokens_after <= report.hard_limit_tokens < 2048 - MAX_OUT
    assert [a.kb_id for a in report.articles] == ["prompt-context"] and report.articles[0].tokens_after > 500
    assert ANSWER in text_of(sent[1])  # the sentence the question asks about survives
    assert text_of(sent[0]) == text_of(messages[0])  # the template's system message as it came
    user = text_of(sent[1])
    assert user.startswith("Context information is below.")
    assert user.endswith("Query: Which key inserts a table?\nAnswer: ")


def test_a_completion_prompt_and_a_condense_plus_context_system_message_are_fitted_too() -> None:
    from llama_index.core.chat_engine.condense_plus_context import DEFAULT_CONTEXT_PROMPT_TEMPLATE
    from llama_index.core.prompts.default_prompts import DEFAULT_TEXT_QA_PROMPT

    inner = _inner()
    llm = BudgetedLLM(inner, ContextBudget())
    llm.complete(DEFAULT_TEXT_QA_PROMPT.format(context_str=_context(4000), query_str="Which key inserts a table?"))
    system = DEFAULT_CONTEXT_PROMPT_TEMPLATE.format(context_str=_context(4000))
    history = [
        ChatMessage(role="user", content="And charts?"),
        ChatMessage(role="assistant", content="Insert - Chart."),
    ]
    llm.chat([ChatMessage(role="system", content=system), *history, ChatMessage(role="user", content="Tables?")])

    for call, report in zip(inner.calls, llm.reports, strict=True):
        assert "compressed" in report.path and report.tokens_after <= report.hard_limit_tokens
        assert ANSWER in text_of(call.messages[0])
    assert [text_of(m) for m in inner.calls[1].messages[1:]] == ["And charts?", "Insert - Chart.", "Tables?"]


def test_a_prompt_without_a_known_context_block_has_its_largest_message_cut_in_the_middle(
    caplog: pytest.LogCaptureFixture,
) -> None:
    inner = _inner()
    llm = BudgetedLLM(inner, ContextBudget())
    history = "\n".join(f"user: question {i} about tables and charts in Writer" for i in range(600))
    prompt = f"Rephrase the follow up question.\nChat History:\n{history}\nFollow Up Input: and pages?\nStandalone:"

    with caplog.at_level("WARNING", logger="ragidx.agent.budgeted_llm"):
        llm.complete(prompt)

    (report,) = llm.reports
    sent = text_of(inner.calls[0].messages[-1])
    assert report.path == ["middle_truncated"] and report.tokens_before > 2048
    assert report.tokens_after <= report.hard_limit_tokens and TokenCounter().count(sent) < 2048 - MAX_OUT
    assert sent.startswith("Rephrase the follow up question.")
    assert sent.endswith("Follow Up Input: and pages?\nStandalone:")
    assert "no context block of a known template" in caplog.text and "cut the middle" in caplog.text


def test_a_template_of_ones_own_is_recognised_by_its_markers() -> None:
    from ragidx.budget.prompt_context import ContextMarker

    inner = _inner()
    llm = BudgetedLLM(inner, ContextBudget(), context_markers=[ContextMarker("docs", "<docs>", "</docs>")])
    llm.chat([ChatMessage(role="user", content=f"<docs>{_context(4000)}</docs>\nQuery: Which key inserts a table?")])
    assert "compressed" in llm.reports[0].path and ANSWER in text_of(inner.calls[0].messages[0])


def test_an_agents_search_results_stay_the_budgets_material_whatever_text_they_quote() -> None:
    from tests.budget.helpers import article, tool_call, tool_result

    quoting = "Context information is below.\n---------------------\nquoted\n---------------------\nQuery: x"
    inner = _inner(4096)
    llm = BudgetedLLM(inner, ContextBudget())
    messages = [
        ChatMessage(role="user", content=quoting),  # a user pasting a template does not turn off the agent's budget
        tool_call("c1"),
        tool_result("c1", [article("a", 0.9, _context(3000)), article("b", 0.5, _context(3000))]),
    ]
    llm.chat(messages)
    assert {a.kb_id for a in llm.reports[0].articles} == {"a", "b"} and "compressed" in llm.reports[0].path
