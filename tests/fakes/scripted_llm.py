"""A scripted function-calling LLM for protocol tests.

Each call to ``chat``/``achat`` (and the ``*_with_tools`` variants) consumes the next step of the
script. A step is one of:

- ``str``: a plain assistant reply;
- a ``ChatResponse``: returned as it is (a reply with ``logprobs``, say);
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole, TextBlock, ToolCallBlock
from pydantic import PrivateAttr

from ragidx.providers.playback import PlaybackLLM


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


class ScriptedLLM(PlaybackLLM):
    """See module docstring."""

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

    # --- the script --------------------------------------------------------------------------
    def _reply(self, messages: list[ChatMessage], kwargs: dict[str, Any]) -> ChatResponse:
        call = RecordedCall(list(messages), list(kwargs.pop("tools", []) or []), kwargs)
        self.calls.append(call)
        try:
            step = next(self._steps)
        except StopIteration:
            raise AssertionError(f"ScriptedLLM ran out of script after {len(self.calls) - 1} calls") from None
        while callable(step) and not isinstance(step, ToolCall):
            step = step(list(messages), call)
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, ChatResponse):
            return step
        return ChatResponse(message=self._message(step))

    def _message(self, step: Step) -> ChatMessage:
        if isinstance(step, str):
            return ChatMessage(role=MessageRole.ASSISTANT, content=step)
        calls = [step] if isinstance(step, ToolCall) else list(step)
        blocks: list[Any] = [
            ToolCallBlock(tool_call_id=c.call_id or f"call_{next(self._ids)}", tool_name=c.name, tool_kwargs=c.kwargs)
            for c in calls
        ]
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks)


def text_of(message: ChatMessage) -> str:
    """All text blocks of a message, joined."""
    return "".join(b.text for b in message.blocks if isinstance(b, TextBlock))


ReplyFn = Callable[[list[ChatMessage], RecordedCall], Step]
