"""The conversation reaches flash through a ContextVar: set around a search, read by the postprocessor."""

from __future__ import annotations

import asyncio

from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock

from ragidx.retrieval.flash import current_conversation, flash_conversation
from ragidx.retrieval.flash.conversation import spoken


def test_only_spoken_messages_are_kept() -> None:
    call = ChatMessage(role=MessageRole.ASSISTANT, blocks=[ToolCallBlock(tool_name="retrieve_context", tool_kwargs={})])
    messages = [
        ChatMessage(role=MessageRole.SYSTEM, content="You answer."),
        ChatMessage(role=MessageRole.USER, content="How do I insert a table?"),
        call,
        ChatMessage(role=MessageRole.TOOL, content='{"articles": []}'),
        ChatMessage(role=MessageRole.ASSISTANT, content="Choose Table > Insert Table."),
        ChatMessage(role=MessageRole.ASSISTANT, content="  "),
        "user: and print it?",
        "",
    ]
    kept = spoken(messages)
    assert [m if isinstance(m, str) else m.content for m in kept] == [
        "How do I insert a table?",
        "Choose Table > Insert Table.",
        "user: and print it?",
    ]


def test_the_conversation_is_set_for_the_block_only_and_nests() -> None:
    assert current_conversation() == ()
    with flash_conversation(["user: a"]):
        with flash_conversation(["user: b"]):
            assert current_conversation() == ("user: b",)
        assert current_conversation() == ("user: a",)
    assert current_conversation() == ()


def test_it_follows_the_search_into_threads_and_stays_apart_between_concurrent_questions() -> None:
    async def search(name: str) -> tuple[str, ...]:
        with flash_conversation([f"user: {name}"]):
            await asyncio.sleep(0.01)  # the other question runs meanwhile
            return await asyncio.to_thread(current_conversation)

    async def both() -> list[tuple[str, ...]]:
        return list(await asyncio.gather(search("first"), search("second")))

    assert asyncio.run(both()) == [("user: first",), ("user: second",)]
