"""The agent's prompts as replaceable LlamaIndex templates (PromptMixin) on the agent, the engine and its
query and chat engines: what ``update_prompts`` changes is what the scripted model receives."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from llama_index.core.base.llms.types import MessageRole
from llama_index.core.prompts import PromptTemplate

from ragidx.agent.answer import Answer
from ragidx.agent.prompts import ANSWER_PROMPT, CHECK_PROMPT, PLAN_PROMPT, SYSTEM_PROMPT
from ragidx.agent.rendering import _answer_prompt
from ragidx.agent.workflow import RagAgent
from ragidx.article import Article
from ragidx.config import Settings
from ragidx.engine import Engine
from tests.agent.helpers import make_agent
from tests.agent.llamaindex_helpers import writer_engine
from tests.fakes.scripted_llm import ScriptedLLM, text_of

AGENT_PROMPTS = ["answer_prompt", "check_prompt", "plan_prompt", "system_prompt"]
CUSTOM_ANSWER = "ZEBRA-INSTRUCTION: answer in one sentence.{language}\n\nSources:\n{sources}\n\nQuestion: {question}"


@pytest.fixture
def engine(tmp_path_factory: pytest.TempPathFactory, writer_kb_file: str) -> Iterator[Engine]:
    yield from writer_engine(tmp_path_factory.mktemp("prompts"), writer_kb_file)


def _ask(agent: RagAgent, question: str) -> Answer:
    async def run() -> Answer:
        result: Answer = await agent.run(question=question)
        return result

    return asyncio.run(run())


def _sent(engine: Engine) -> list[str]:
    llm: ScriptedLLM = engine.agent().llm
    return [text_of(m) for m in llm.calls[-1].messages]


def test_the_default_templates_render_the_prompt_texts_unchanged() -> None:
    articles = [Article("a", "20.4. Resource {Consumption}", "", "x"), Article("b", "", "", "y")]
    rendered = _answer_prompt("Сколько памяти?", articles)
    lines = "[1] Resource {Consumption}\n[2] b"
    clause = " Write the answer in Russian."
    assert rendered == ANSWER_PROMPT.format(sources=lines, question="Сколько памяти?", language=clause)
    agent, _ = make_agent([])
    prompts = agent.get_prompts()
    assert sorted(prompts) == AGENT_PROMPTS
    assert [prompts[n].format(question="Q") for n in ("system_prompt", "check_prompt", "plan_prompt")] == [
        SYSTEM_PROMPT,
        CHECK_PROMPT.format(question="Q"),
        PLAN_PROMPT,
    ]


def test_the_query_engine_lists_the_prompts_and_a_replaced_answer_prompt_is_what_the_model_reads(
    engine: Engine,
) -> None:
    query_engine = engine.as_query_engine()
    assert sorted(query_engine.get_prompts()) == AGENT_PROMPTS  # the local model: no condense step

    query_engine.update_prompts({"answer_prompt": PromptTemplate(CUSTOM_ANSWER)})
    response = query_engine.query("How do I create a table of contents?")

    instruction = _sent(engine)[-1]
    assert instruction.startswith("ZEBRA-INSTRUCTION: answer in one sentence.")
    assert instruction.endswith("Question: How do I create a table of contents?") and "[1] " in instruction
    assert "[1]" in str(response) and response.source_nodes  # the answer still cites what the model was shown
    assert engine.get_prompts()["answer_prompt"].get_template() == CUSTOM_ANSWER  # one engine, one set
    assert engine.as_chat_engine().get_prompts()["answer_prompt"].get_template() == CUSTOM_ANSWER


def test_prompts_replaced_before_the_agent_is_built_are_the_ones_it_sends(tmp_path: object) -> None:
    from tests.dashboard.fakes import make_engine

    with make_engine(Settings(data_dir=tmp_path)) as engine:  # type: ignore[arg-type]
        engine.update_prompts({"system_prompt": PromptTemplate("You are the ZEBRA help desk.")})
        assert engine._agent is None  # listing and replacing prompts builds nothing
        engine.ingest(
            [
                Article(
                    "tables", "Tables", "https://kb/tables", "To insert a table in Writer choose Table > Insert Table."
                )
            ]
        )
        engine.ask("How do I insert a table?")
        calls = engine.agent().llm.calls
        assert calls and all(text_of(c.messages[0]) == "You are the ZEBRA help desk." for c in calls)
        assert all(c.messages[0].role == MessageRole.SYSTEM for c in calls)


def test_the_chat_engine_replaces_the_prompts_of_its_engine(engine: Engine) -> None:
    chat = engine.as_chat_engine()
    chat.update_prompts({"answer_prompt": PromptTemplate(CUSTOM_ANSWER)})
    reply = chat.chat("How do I create a table of contents?")
    assert _sent(engine)[-1].startswith("ZEBRA-INSTRUCTION") and "[1]" in reply.response


def test_a_replaced_plan_prompt_is_what_the_planning_call_sends() -> None:
    from tests.fakes.scripted_llm import ToolCall

    plan = ToolCall("plan_searches", {"queries": ["insert table"]})
    agent, llm = make_agent([plan, "Use Table > Insert Table [1]."], tool_mode="forced")
    agent.update_prompts({"plan_prompt": PromptTemplate("ZEBRA: plan your searches.")})
    answer = _ask(agent, "How do I insert a table?")
    assert not answer.not_found and llm.calls[0].tools
    assert text_of(llm.calls[0].messages[-1]) == "ZEBRA: plan your searches."


def test_an_unknown_prompt_or_one_without_its_variables_is_refused_with_a_clear_error(engine: Engine) -> None:
    query_engine = engine.as_query_engine()
    with pytest.raises(ValueError, match="unknown prompt 'answer'; the prompts are answer_prompt"):
        query_engine.update_prompts({"answer": PromptTemplate("x")})
    with pytest.raises(ValueError, match=r"'answer_prompt' must use the variables \['sources'\]"):
        query_engine.update_prompts({"answer_prompt": PromptTemplate("Answer: {question}{language}")})
    assert engine.get_prompts()["answer_prompt"].get_template() == ANSWER_PROMPT  # nothing was replaced


def test_the_agents_replaced_check_prompt_is_what_the_answer_check_sends() -> None:
    from llama_index.core.base.llms.types import ChatMessage, ChatResponse, LogProb

    yes = ChatResponse(
        message=ChatMessage(role=MessageRole.ASSISTANT, content="YES"),
        logprobs=[[LogProb(token="YES", logprob=-0.1), LogProb(token="NO", logprob=-3.0)]],
    )
    agent, llm = make_agent([yes, "Use Table > Insert Table [1]."], tool_mode="forced", plan="never", answer_check=0.0)
    agent.update_prompts({"check_prompt": PromptTemplate("ZEBRA? {question} YES or NO.")})
    answer = _ask(agent, "How do I insert a table?")
    assert not answer.not_found and len(llm.calls) == 2
    assert text_of(llm.calls[0].messages[-1]) == "ZEBRA? How do I insert a table? YES or NO."
