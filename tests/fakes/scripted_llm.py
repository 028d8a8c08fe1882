"""A scripted function-calling LLM for protocol tests.

Each call to ``chat``/``achat`` (and the ``*_with_tools`` variants) consumes the next step of the
script. A step is one of:

- ``str``: a plain assistant reply;
- ``ToolCall`` / ``list[ToolCall]``: an assistant message that calls tools;
- an ``Exception`` instance: raised (an endpoint error);
- a callable ``(messages, call) -> step``: computes the reply from what the model was sent.

With ``cycle=True`` the script repeats; otherwise running past its end fails the test loudly.
Every call is recorded in ``calls`` (messages, tools, kwargs) so tests can assert on prompts.

Example:
    >>> llm = ScriptedLLM([ToolCall("retrieve_context", {"query": "x"}), "done"])
    >>> llm.chat([]).message.blocks[0].tool_name
    'retrieve_context'
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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
    TextBlock,
    ToolCallBlock,
)
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection
from pydantic import PrivateAttr


@dataclass
class ToolCall:
    name: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    call_id: str | None = None


@dataclass
class RecordedCall:
    messages: list[ChatMessage]
    tools: list[Any]
    kwargs: dict[str, Any]


Step = Any


class ScriptedLLM(FunctionCallingLLM):
    """See module docstring."""

    context_window: int = 8192
    num_output: int = 256
    model_name: str = "scripted"

    _script: list[Step] = PrivateAttr()
    _steps: Any = PrivateAttr()
    _ids: Any = PrivateAttr()
    calls: list[RecordedCall] = []

    def __init__(self, script: Sequence[Step], cycle: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._script = list(script)
        self._steps = itertools.cycle(self._script) if cycle else iter(self._script)
        self._ids = itertools.count(1)
        self.calls = []

    @classmethod
    def class_name(cls) -> str:
        return "ScriptedLLM"

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(
            context_window=self.context_window,
            num_output=self.num_output,
            is_chat_model=True,
            is_function_calling_model=True,
            model_name=self.model_name,
        )

    # --- the script --------------------------------------------------------------------------
    def _next(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> ChatResponse:
        call = RecordedCall(list(messages), list(kwargs.pop("tools", []) or []), kwargs)
        self.calls.append(call)
        try:
            step = next(self._steps)
        except StopIteration:
            raise AssertionError(
                f"ScriptedLLM ran out of script after {len(self.calls) - 1} calls"
            ) from None
        while callable(step) and not isinstance(step, ToolCall):
            step = step(list(messages), call)
        if isinstance(step, BaseException):
            raise step
        return ChatResponse(message=self._message(step))

    def _message(self, step: Step) -> ChatMessage:
        if isinstance(step, str):
            return ChatMessage(role=MessageRole.ASSISTANT, content=step)
        calls = [step] if isinstance(step, ToolCall) else list(step)
        blocks: list[Any] = [
            ToolCallBlock(
                tool_call_id=c.call_id or f"call_{next(self._ids)}", tool_name=c.name, tool_kwargs=c.kwargs
            )
            for c in calls
        ]
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks)

    # --- LLM interface ------------------------------------------------------------------------
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._next(messages, kwargs)

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._next(messages, kwargs)

    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        response = self._next(messages, kwargs)

        def gen() -> ChatResponseGen:
            text = response.message.content or ""
            yield ChatResponse(message=response.message, delta=text)

        return gen()

    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        response = self._next(messages, kwargs)

        async def gen() -> ChatResponseAsyncGen:
            yield ChatResponse(message=response.message, delta=response.message.content or "")

        return gen()

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        r = self._next([ChatMessage(role=MessageRole.USER, content=prompt)], kwargs)
        return CompletionResponse(text=r.message.content or "")

    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return self.complete(prompt, formatted, **kwargs)

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        raise NotImplementedError

    async def astream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseAsyncGen:
        raise NotImplementedError

    # --- function calling ---------------------------------------------------------------------
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


def text_of(message: ChatMessage) -> str:
    """All text blocks of a message, joined."""
    return "".join(b.text for b in message.blocks if isinstance(b, TextBlock))


ReplyFn = Callable[[list[ChatMessage], RecordedCall], Step]
