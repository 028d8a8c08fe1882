"""Follow-up questions as standalone searches: the heuristic (local model) and the LLM condense step
(endpoints), alone and inside the agent, with the scripted LLM fake."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.prompts import PromptTemplate

from ragidx.agent.answer import Answer
from ragidx.agent.rewrite import CondenseRewriter, HeuristicRewriter, QueryRewriter, follow_up_query
from ragidx.agent.workflow import RagAgent
from ragidx.budget import ContextBudget
from ragidx.config import LLMEndpoint, Settings
from tests.agent.helpers import make_tool
from tests.fakes.scripted_llm import ScriptedLLM, ToolCall, text_of

TOC = [
    ChatMessage(role=MessageRole.USER, content="How do I insert a table of contents?"),
    ChatMessage(role=MessageRole.ASSISTANT, content="Choose Insert > Table of Contents [1]."),
]


def ask(agent: Any, question: str, session_id: str | None = None) -> Answer:
    async def run() -> Answer:
        result: Answer = await agent.run(question=question, session_id=session_id)
        return result

    return asyncio.run(run())


def test_the_heuristic_rewriter_is_the_follow_up_rule_and_calls_no_model() -> None:
    rewriter = HeuristicRewriter()
    assert isinstance(rewriter, QueryRewriter)
    for question in ("And how do I update it?", "How can I protect cells in a Calc sheet from changes?", "Update?"):
        assert rewriter.rewrite(TOC, question) == (follow_up_query(TOC, question) or question)
    assert rewriter.rewrite([], "And how do I update it?") == "And how do I update it?"


def test_condense_asks_the_model_with_the_conversation_and_returns_its_standalone_question() -> None:
    llm = ScriptedLLM(['"How do I update a table of contents in Writer?"\nThe user means the TOC.'])
    rewriter = CondenseRewriter(llm)
    assert isinstance(rewriter, QueryRewriter)

    assert rewriter.rewrite(TOC, "And how do I update it?") == "How do I update a table of contents in Writer?"

    [call] = llm.calls
    prompt = text_of(call.messages[-1])
    assert "user: How do I insert a table of contents?" in prompt
    assert "assistant: Choose Insert > Table of Contents [1]." in prompt
    assert prompt.rstrip().endswith("Follow-up question: And how do I update it?\nStandalone question:")


def test_condense_is_not_called_on_a_first_question_or_when_skipped() -> None:
    llm = ScriptedLLM([])  # any call fails the test: the script is empty
    assert CondenseRewriter(llm).rewrite([], "How do I insert a table?") == "How do I insert a table?"
    skipped = CondenseRewriter(llm, skip_condense=True)
    assert skipped.rewrite(TOC, "And how do I update it?") == "And how do I update it?"
    assert llm.calls == []


def test_a_failed_or_empty_condense_searches_the_question_as_asked() -> None:
    from ragidx.providers.chat import LLMRequestError

    llm = ScriptedLLM([LLMRequestError("HTTP 400: bad request"), "  \n"])
    rewriter = CondenseRewriter(llm)
    assert rewriter.rewrite(TOC, "And how do I update it?") == "And how do I update it?"
    assert rewriter.rewrite(TOC, "And how do I update it?") == "And how do I update it?"
    assert len(llm.calls) == 2


def test_the_condense_prompt_is_replaceable_and_checked() -> None:
    llm = ScriptedLLM(["How do I update a TOC?"])
    rewriter = CondenseRewriter(llm)
    rewriter.update_prompts({"condense_prompt": PromptTemplate("ZEBRA {chat_history} || {question} ->")})
    rewriter.rewrite(TOC, "And it?")
    assert text_of(llm.calls[0].messages[-1]).startswith("ZEBRA user: How do I insert")
    with pytest.raises(ValueError, match="must use the variables"):
        rewriter.update_prompts({"condense_prompt": PromptTemplate("{question} only")})


def test_an_endpoint_agent_condenses_a_follow_up_and_searches_it_first_but_not_a_first_question() -> None:
    searched: list[str] = []
    script = [
        # first question: the model decides (no condense call), searches, answers
        ToolCall("retrieve_context", {"query": "insert table writer"}),
        "done searching",
        "Choose Table > Insert Table [1].",
        # follow-up: condense, then the condensed question is searched before the model decides
        "How do I print a table in Writer?",
        "done searching",
        "Choose File > Print [1].",
    ]
    llm = ScriptedLLM(script)  # one model for the agent and its rewriter, as the engine builds them
    tool = make_tool(calls=searched)
    agent = RagAgent(llm, tool, ContextBudget(), context_window=8192, backoff_s=0.0, rewriter=CondenseRewriter(llm))

    first = ask(agent, "How do I insert a table in Writer?", session_id="s")
    assert searched == ["insert table writer"] and len(llm.calls) == 3 and llm.calls[0].tools

    second = ask(agent, "And how do I print it?", session_id="s")
    condense = llm.calls[3]
    assert not condense.tools and "Follow-up question: And how do I print it?" in text_of(condense.messages[-1])
    assert searched[1:] == ["How do I print a table in Writer?"]
    assert second.queries == ["How do I print a table in Writer?"] and not second.not_found
    assert "And how do I print it?" in text_of(llm.calls[-1].messages[-1])  # the answer asks the question as written
    assert sorted(agent.get_prompts()) == [
        "answer_prompt",
        "check_prompt",
        "condense_prompt",
        "plan_prompt",
        "system_prompt",
    ]
    assert first.text.startswith("Choose Table")


def test_the_follow_up_setting_picks_the_rewriter_by_model_and_tool_mode() -> None:
    assert LLMEndpoint().effective_follow_ups == "heuristic"  # the local model, forced tool calls
    assert LLMEndpoint(tool_mode="auto").effective_follow_ups == "off"  # it writes its own queries
    assert LLMEndpoint(api_base="http://127.0.0.1:1/v1", model="m").effective_follow_ups == "condense"
    endpoint = LLMEndpoint(api_base="http://127.0.0.1:1/v1", model="m", follow_ups="off")
    assert endpoint.effective_follow_ups == "off"


def test_an_endpoint_engine_condenses_follow_ups_and_lists_the_condense_prompt(tmp_path: Any) -> None:
    from tests.dashboard.fakes import make_engine

    endpoint = LLMEndpoint(api_base="http://127.0.0.1:1/v1", model="m")
    with make_engine(Settings(data_dir=tmp_path, llm=endpoint)) as engine:
        assert "condense_prompt" in engine.get_prompts() and engine._agent is None
        engine.update_prompts({"condense_prompt": PromptTemplate("ZEBRA {chat_history} {question}")})
        rewriter = engine.agent().rewriter
        assert isinstance(rewriter, CondenseRewriter) and rewriter.llm is engine.agent().llm
        assert rewriter.condense_prompt.get_template() == "ZEBRA {chat_history} {question}"
    with make_engine(Settings(data_dir=tmp_path / "local")) as engine:
        assert isinstance(engine.agent().rewriter, HeuristicRewriter)
        assert "condense_prompt" not in engine.as_query_engine().get_prompts()
