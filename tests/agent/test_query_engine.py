"""The agent as a LlamaIndex query engine, run inside LlamaIndex's QueryEngineTool, FunctionAgent and
RouterQueryEngine (real engine, scripted chat models)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.response.schema import AsyncStreamingResponse, Response, StreamingResponse
from llama_index.core.query_engine import CustomQueryEngine, RouterQueryEngine
from llama_index.core.selectors import LLMSingleSelector
from llama_index.core.tools import QueryEngineTool

from ragidx.engine import Engine
from tests.agent.llamaindex_helpers import writer_engine
from tests.fakes.scripted_llm import ScriptedLLM, ToolCall, text_of

QUESTION = "How do I create a table of contents?"


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory, writer_kb_file: str) -> Iterator[Engine]:
    yield from writer_engine(tmp_path_factory.mktemp("query-engine"), writer_kb_file)


def test_query_returns_the_answer_with_its_cited_articles(engine: Engine) -> None:
    query_engine = engine.as_query_engine()
    assert isinstance(query_engine, BaseQueryEngine)

    response = query_engine.query(QUESTION)

    assert isinstance(response, Response)
    meta = response.metadata or {}
    assert response.response and "[1]" in response.response and not meta["not_found"]
    cited = [c["kb_id"] for c in meta["citations"]]
    assert [n.node.metadata["kb_id"] for n in response.source_nodes] == cited and len(cited) == 2
    assert [n.node.metadata["citation"] for n in response.source_nodes] == [1, 2]
    assert response.source_nodes[0].node.get_content()  # the text the model was shown
    assert {"queries", "budget_reports", "timings", "tokens", "articles"} <= set(meta)
    assert meta["queries"][0] == QUESTION and meta["articles"] and "content" not in meta["articles"][0]


def test_streaming_query_yields_text_then_fills_sources(engine: Engine) -> None:
    response = engine.as_query_engine(streaming=True).query(QUESTION)
    assert isinstance(response, StreamingResponse) and response.source_nodes == []  # known at the end

    text = "".join(response.response_gen)

    assert text.strip() and "[1]" in text
    assert len(response.source_nodes) == 2 and (response.metadata or {})["text"] == text.strip()


def test_async_queries(engine: Engine) -> None:
    query_engine = engine.as_query_engine()
    response = asyncio.run(query_engine.aquery(QUESTION))
    assert isinstance(response, Response) and len(response.source_nodes) == 2

    async def streamed() -> tuple[str, AsyncStreamingResponse]:
        result = await engine.as_query_engine(streaming=True).aquery(QUESTION)
        assert isinstance(result, AsyncStreamingResponse)
        return "".join([t async for t in result.async_response_gen()]), result

    text, result = asyncio.run(streamed())
    assert "[1]" in text and len(result.source_nodes) == 2


def test_a_not_found_answer_streams_its_text_and_cites_nothing(engine: Engine) -> None:
    response = engine.as_query_engine(streaming=True).query("Welche Farbe hat der Himmel über Tokio?")
    text = "".join(response.response_gen)  # decided without the model: nothing was generated
    assert text == (response.metadata or {})["text"] and "could not find" in text
    assert response.source_nodes == [] and (response.metadata or {})["not_found"]


def test_inside_a_query_engine_tool_used_by_a_function_agent(engine: Engine) -> None:
    tool = QueryEngineTool.from_defaults(
        engine.as_query_engine(), name="writer_docs", description="Answers questions about LibreOffice Writer."
    )
    llm = ScriptedLLM([ToolCall("writer_docs", {"input": QUESTION}), "Here is how, from the docs."])
    agent = FunctionAgent(tools=[tool], llm=llm, system_prompt="Use the docs.")

    async def run() -> object:
        return await agent.run(user_msg=QUESTION)

    result: Any = asyncio.run(run())

    assert str(result) == "Here is how, from the docs."
    assert len(result.tool_calls) == 1
    output = result.tool_calls[0].tool_output
    assert output.tool_name == "writer_docs" and not output.is_error
    assert "[1]" in output.content and "Table of Contents" in output.content
    assert len(output.raw_output.source_nodes) == 2  # the Response, with the cited articles
    second_prompt = "\n".join(text_of(m) for m in llm.calls[1].messages)
    assert output.content in second_prompt  # the agent read ragidx's answer


def test_inside_a_router_query_engine(engine: Engine) -> None:
    class Other(CustomQueryEngine):
        def custom_query(self, query_str: str) -> str:
            return "wrong engine"

    tools = [
        QueryEngineTool.from_defaults(Other(), name="other", description="Answers about cooking."),
        QueryEngineTool.from_defaults(engine.as_query_engine(), name="docs", description="Answers about Writer."),
    ]
    selector = LLMSingleSelector.from_defaults(llm=ScriptedLLM(['[{"choice": 2, "reason": "about Writer"}]']))
    router = RouterQueryEngine(selector=selector, query_engine_tools=tools, llm=ScriptedLLM([]))

    response = router.query(QUESTION)

    assert "[1]" in str(response) and "wrong engine" not in str(response)
    assert len(response.source_nodes) == 2
    assert (response.metadata or {})["selector_result"].selections[0].index == 1


def test_a_dead_endpoint_is_named_by_every_query_path(tmp_path: Any) -> None:
    from ragidx.providers.chat import LLMUnavailableError
    from tests.endpoints import dead_endpoint, engine_on

    async def astreamed(query_engine: Any) -> str:
        response = await query_engine.aquery(QUESTION)
        return "".join([piece async for piece in response.async_response_gen()])

    with engine_on(dead_endpoint(), tmp_path, max_retries=0) as engine:
        plain, streaming = engine.as_query_engine(), engine.as_query_engine(streaming=True)
        attempts = [
            lambda: plain.query(QUESTION),
            lambda: asyncio.run(plain.aquery(QUESTION)),
            lambda: "".join(streaming.query(QUESTION).response_gen),
            lambda: asyncio.run(astreamed(streaming)),
        ]
        for attempt in attempts:
            with pytest.raises(LLMUnavailableError, match="connection refused"):
                attempt()
