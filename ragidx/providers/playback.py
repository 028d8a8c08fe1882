"""``PlaybackLLM``: a function-calling LLM whose replies come from code, not from a model.

The base of the flash reranker's ``ReplayLLM`` (recorded responses) and of the tests' ``ScriptedLLM``
(a script): a subclass implements ``_reply(messages, kwargs)``; this class gives it the whole LlamaIndex
LLM surface (chat, streaming, completion, tool calling) the way ``FunctionCallingLLM`` expects.

Example:
    >>> class Echo(PlaybackLLM):
    ...     def _reply(self, messages, kwargs):
    ...         return ChatResponse(message=ChatMessage(role="assistant", content=messages[-1].content))
    >>> Echo().chat([ChatMessage(role="user", content="hi")]).message.content
    'hi'
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
    ToolCallBlock,
)
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection

__all__ = ["PlaybackLLM"]


class PlaybackLLM(FunctionCallingLLM):
    """A function-calling LLM that answers through ``_reply``; see the module docstring.

    ``_reply`` gets the messages and the call's options (``tools`` and ``tool_required`` included for
    tool calls) and returns a ``ChatResponse`` or raises (an endpoint error).
    """

    context_window: int = 8192
    num_output: int = 256
    model_name: str = "playback"

    @classmethod
    def class_name(cls) -> str:
        return "PlaybackLLM"

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(
            context_window=self.context_window,
            num_output=self.num_output,
            is_chat_model=True,
            is_function_calling_model=True,
            model_name=self.model_name,
        )

    def _reply(self, messages: list[ChatMessage], kwargs: dict[str, Any]) -> ChatResponse:
        raise NotImplementedError

    # --- chat -------------------------------------------------------------------------------------
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._reply(list(messages), kwargs)

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._reply(list(messages), kwargs)

    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        response = self._reply(list(messages), kwargs)

        def gen() -> ChatResponseGen:
            yield ChatResponse(message=response.message, delta=response.message.content or "", raw=response.raw)

        return gen()

    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        response = self._reply(list(messages), kwargs)

        async def gen() -> ChatResponseAsyncGen:
            yield ChatResponse(message=response.message, delta=response.message.content or "", raw=response.raw)

        return gen()

    # --- completion -------------------------------------------------------------------------------
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        reply = self._reply([ChatMessage(role=MessageRole.USER, content=prompt)], kwargs)
        return CompletionResponse(text=reply.message.content or "", raw=reply.raw)

    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return self.complete(prompt, formatted, **kwargs)

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        reply = self.complete(prompt, formatted, **kwargs)

        def gen() -> CompletionResponseGen:
            yield CompletionResponse(text=reply.text, delta=reply.text, raw=reply.raw)

        return gen()

    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseAsyncGen:
        reply = self.complete(prompt, formatted, **kwargs)

        async def gen() -> CompletionResponseAsyncGen:
            yield CompletionResponse(text=reply.text, delta=reply.text, raw=reply.raw)

        return gen()

    # --- tool calling -----------------------------------------------------------------------------
    def _prepare_chat_with_tools(
        self,
        tools: Sequence[Any],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        messages = list(chat_history or [])
        if user_msg is not None:
            messages.append(
                user_msg if isinstance(user_msg, ChatMessage) else ChatMessage(role="user", content=user_msg)
            )
        return {"messages": messages, "tools": list(tools), "tool_required": tool_required, **kwargs}

    def get_tool_calls_from_response(
        self, response: ChatResponse, error_on_no_tool_call: bool = True, **kwargs: Any
    ) -> list[ToolSelection]:
        calls = [b for b in response.message.blocks if isinstance(b, ToolCallBlock)]
        if not calls and error_on_no_tool_call:
            raise ValueError("expected a tool call")
        return [
            ToolSelection(
                tool_id=c.tool_call_id or "",
                tool_name=c.tool_name,
                tool_kwargs=c.tool_kwargs if isinstance(c.tool_kwargs, dict) else json.loads(c.tool_kwargs),
            )
            for c in calls
        ]
