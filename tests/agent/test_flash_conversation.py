"""The agent hands a session's conversation to the search, where a flash rerank reads it."""

from __future__ import annotations

import asyncio
from typing import Any

from llama_index.core.tools import FunctionTool

from ragidx.agent.answer import Answer
from ragidx.retrieval.flash import current_conversation
from tests.agent.helpers import make_agent, make_tool
from tests.fakes.scripted_llm import text_of


def _recording_tool(seen: list[list[str]]) -> FunctionTool:
    inner = make_tool()

    async def retrieve_context(query: str, top_k: int | None = None) -> str:
        """Search the knowledge base; returns articles as JSON."""
        seen.append([m if isinstance(m, str) else f"{m.role.value}: {text_of(m)}" for m in current_conversation()])
        return (await inner.acall(query=query, top_k=top_k)).content

    return FunctionTool.from_defaults(async_fn=retrieve_context, name="retrieve_context")


def _ask(agent: Any, question: str, session_id: str | None) -> Answer:
    async def go() -> Answer:
        return await agent.run(question=question, session_id=session_id)

    return asyncio.run(go())


def test_each_search_of_a_session_sees_the_conversation_before_the_question() -> None:
    seen: list[list[str]] = []
    agent, _ = make_agent(
        ["Choose Table > Insert Table [1].", "Choose File > Print [1].", "Choose File > Print [1]."],
        tool=_recording_tool(seen), tool_mode="forced", plan="never",
    )  # fmt: skip
    _ask(agent, "How do I insert a table?", "s")
    _ask(agent, "And how do I print it?", "s")
    _ask(agent, "How do I print a document?", None)  # no session: no conversation

    assert seen == [
        [],
        ["user: How do I insert a table?", "assistant: Choose Table > Insert Table [1]."],
        [],
    ]
