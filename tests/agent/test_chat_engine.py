"""The agent as a LlamaIndex chat engine: one conversation is one ragidx session (real engine, scripted LLM)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.chat_engine.types import AgentChatResponse, BaseChatEngine

from ragidx.agent.answer import Answer
from ragidx.engine import Engine
from tests.agent.llamaindex_helpers import writer_engine
from tests.fakes.scripted_llm import text_of


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory, writer_kb_file: str) -> Iterator[Engine]:
    yield from writer_engine(tmp_path_factory.mktemp("chat-engine"), writer_kb_file)


def _last_prompt(engine: Engine) -> str:
    return "\n".join(text_of(m) for m in engine.agent().llm.calls[-1].messages)


def test_a_conversation_keeps_its_turns_and_cites(engine: Engine) -> None:
    chat = engine.as_chat_engine()
    assert isinstance(chat, BaseChatEngine) and chat.chat_history == []

    first = chat.chat("How do I create a table of contents?")
    assert isinstance(first, AgentChatResponse) and "[1]" in first.response
    assert len(first.source_nodes) == 2 and first.metadata and first.metadata["session_id"] == chat.session_id
    assert isinstance(first.sources[0].raw_output, Answer)

    second = chat.chat("And how do I update the page numbers in it?")
    assert "How do I create a table of contents?" in _last_prompt(engine)  # the second turn saw the first
    assert second.response and [m.role for m in chat.chat_history].count(MessageRole.USER) >= 2

    chat.reset()
    assert chat.chat_history == []
    chat.chat("How do I print a document?")
    assert "table of contents" not in _last_prompt(engine).lower().split("print a document")[0]


def test_chat_history_passed_in_replaces_the_conversation(engine: Engine) -> None:
    chat = engine.as_chat_engine()
    history = [
        ChatMessage(role=MessageRole.USER, content="My document is called Zanzibar Report."),
        ChatMessage(role=MessageRole.ASSISTANT, content="Noted."),
    ]
    chat.chat("How do I add page numbers?", chat_history=history)
    assert "Zanzibar Report" in _last_prompt(engine)


def test_stream_chat_yields_text_then_sources(engine: Engine) -> None:
    chat = engine.as_chat_engine()
    response = chat.stream_chat("How do I create a table of contents?")
    assert response.source_nodes == []

    text = "".join(response.response_gen)

    assert "[1]" in text and len(response.source_nodes) == 2
    assert response.sources[0].raw_output.text == text.strip()
    assert len(chat.chat_history) >= 2  # the streamed turn is in the conversation too


def test_async_chat_and_stream(engine: Engine) -> None:
    chat = engine.as_chat_engine()

    async def run() -> tuple[AgentChatResponse, str, int]:
        whole = await chat.achat("How do I create a table of contents?")
        streamed = await chat.astream_chat("How do I insert a table?")
        text = "".join([t async for t in streamed.async_response_gen()])
        return whole, text, len(streamed.source_nodes)

    whole, text, sources = asyncio.run(run())
    assert "[1]" in whole.response and "[1]" in text and sources == 2


def test_a_dead_endpoint_is_named_by_every_chat_path(tmp_path: Any) -> None:
    from ragidx.providers.chat import LLMUnavailableError
    from tests.endpoints import dead_endpoint, engine_on

    async def astreamed(chat_engine: Any) -> str:
        response = await chat_engine.astream_chat("How do I insert a table?")
        return "".join([piece async for piece in response.async_response_gen()])

    with engine_on(dead_endpoint(), tmp_path, max_retries=0) as engine:
        chat = engine.as_chat_engine()
        attempts = [
            lambda: chat.chat("How do I insert a table?"),
            lambda: asyncio.run(chat.achat("How do I insert a table?")),
            lambda: "".join(chat.stream_chat("How do I insert a table?").response_gen),
            lambda: asyncio.run(astreamed(chat)),
        ]
        for attempt in attempts:
            with pytest.raises(LLMUnavailableError, match="connection refused"):
                attempt()
