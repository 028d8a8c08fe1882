"""RagChatEngine: the ragidx agent as a LlamaIndex ``BaseChatEngine``.

A conversation is one ragidx session: every message runs a whole turn (searches, the context budget,
citations) that sees the earlier turns, summarized by the budget as they grow. Replies are
``AgentChatResponse`` objects: ``response`` the answer text, ``source_nodes`` the cited articles (see
:mod:`ragidx.agent.query_engine`), ``metadata`` the rest of the answer. ``stream_chat`` / ``astream_chat``
return a ``StreamingAgentChatResponse`` whose ``response_gen`` / ``async_response_gen()`` yields the
model's text as it comes; its ``source_nodes`` and ``sources`` are filled when the stream ends.

``chat_history`` passed to ``chat`` replaces the conversation so far (LlamaIndex's convention); ``reset()``
starts a new one. ``get_prompts()`` / ``update_prompts()`` read and replace the engine's prompts
(:mod:`ragidx.agent.prompts`), as on LlamaIndex's own chat engines.

Example:
    >>> chat = engine.as_chat_engine()                                  # doctest: +SKIP
    >>> chat.chat("How do I insert a table of contents?").response      # doctest: +SKIP
    >>> chat.chat("And how do I update it?").source_nodes               # doctest: +SKIP
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole
from llama_index.core.chat_engine.types import AgentChatResponse, BaseChatEngine, StreamingAgentChatResponse
from llama_index.core.prompts.mixin import PromptDictType, PromptMixin, PromptMixinType
from llama_index.core.tools import ToolOutput

from ragidx.agent.answer import Answer
from ragidx.agent.prompts import prompts_of, update_prompts_of
from ragidx.agent.query_engine import Asker, answer_metadata, answer_source_nodes

__all__ = ["RagChatEngine"]


class RagChatEngine(BaseChatEngine, PromptMixin):
    """The ragidx agent behind LlamaIndex's chat-engine interface. See the module docstring.

    Args:
        engine: a :class:`ragidx.Engine`.
        memory: where the conversation is kept (``engine.memory``, the ``SessionMemory`` its agent uses).
        session_id: the conversation's id; a new one when omitted.

    Example:
        >>> chat = RagChatEngine(engine, engine.memory)      # doctest: +SKIP
        >>> chat.chat("How do I print labels?").source_nodes  # doctest: +SKIP
    """

    def __init__(self, engine: Asker, memory: Any, session_id: str | None = None) -> None:
        self._engine = engine
        self._memory = memory
        self.session_id = session_id or f"chat-{uuid.uuid4().hex[:12]}"

    def _get_prompts(self) -> PromptDictType:
        """The engine's prompts (the agent's; shared with every query and chat engine of the engine)."""
        return prompts_of(self._engine)

    def _update_prompts(self, prompts_dict: PromptDictType) -> None:
        update_prompts_of(self._engine, prompts_dict)

    def _get_prompt_modules(self) -> PromptMixinType:
        return {}

    @property
    def chat_history(self) -> list[ChatMessage]:
        """The conversation so far (user questions and answers; earlier turns may be summarized)."""
        history: list[ChatMessage] = self._memory.get(self.session_id)
        return history

    def reset(self) -> None:
        """Forget this conversation and start a new one."""
        self._memory.clear(self.session_id)
        self.session_id = f"chat-{uuid.uuid4().hex[:12]}"

    def _use_history(self, chat_history: list[ChatMessage] | None) -> None:
        if chat_history is not None:
            self._memory.set(self.session_id, list(chat_history))

    def chat(self, message: str, chat_history: list[ChatMessage] | None = None) -> AgentChatResponse:
        self._use_history(chat_history)
        return _response(self._engine.ask(message, session_id=self.session_id))

    async def achat(self, message: str, chat_history: list[ChatMessage] | None = None) -> AgentChatResponse:
        self._use_history(chat_history)
        return _response(await self._engine.aask(message, session_id=self.session_id))

    def stream_chat(self, message: str, chat_history: list[ChatMessage] | None = None) -> StreamingAgentChatResponse:
        self._use_history(chat_history)
        response = StreamingAgentChatResponse(is_writing_to_memory=False)
        response.chat_stream = _chat_stream(self._engine.stream_ask(message, session_id=self.session_id), response)
        return response

    async def astream_chat(
        self, message: str, chat_history: list[ChatMessage] | None = None
    ) -> StreamingAgentChatResponse:
        self._use_history(chat_history)
        response = StreamingAgentChatResponse(is_writing_to_memory=False)
        response.achat_stream = _achat_stream(self._engine.astream_ask(message, session_id=self.session_id), response)
        return response


def _response(answer: Answer) -> AgentChatResponse:
    return AgentChatResponse(
        response=answer.text,
        sources=[_tool_output(answer)],
        source_nodes=answer_source_nodes(answer),
        metadata=answer_metadata(answer),
    )


def _tool_output(answer: Answer) -> ToolOutput:
    return ToolOutput(
        content=answer.text,
        tool_name="ragidx",
        raw_input={"question": answer.question, "session_id": answer.session_id},
        raw_output=answer,
    )


def _delta(text: str, so_far: str) -> ChatResponse:
    return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=so_far), delta=text)


def _finish(response: StreamingAgentChatResponse, answer: Answer) -> None:
    response.sources.append(_tool_output(answer))
    response.source_nodes.extend(answer_source_nodes(answer))


def _chat_stream(items: Iterator[Any], response: StreamingAgentChatResponse) -> Generator[ChatResponse, None, None]:
    text = ""
    for item in items:
        if isinstance(item, str):
            text += item
            yield _delta(item, text)
        else:  # the text came as it can be shown (Engine.stream_ask), the Answer's text included
            _finish(response, item)


async def _achat_stream(
    items: AsyncIterator[Any], response: StreamingAgentChatResponse
) -> AsyncGenerator[ChatResponse, None]:
    text = ""
    async for item in items:
        if isinstance(item, str):
            text += item
            yield _delta(item, text)
        else:
            _finish(response, item)
