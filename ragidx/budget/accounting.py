"""Token accounting of everything an LLM call sends: system prompt, tool schemas, messages.

Counts use tiktoken (``TokenCounter``); the real model's tokenizer differs, so the budget keeps a
safety margin (a share of the window) on top, and reserves the answer's output tokens. A message
costs its text, its tool calls (as JSON: id, name, arguments), a tool result's call id and name,
and a fixed per-message overhead for role and separators; each prompt adds reply-priming tokens.

Example:
    >>> from llama_index.core.base.llms.types import ChatMessage
    >>> acc = PromptAccountant()
    >>> acc.count_message(ChatMessage(role="user", content="hello world"))
    6
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ThinkingBlock, ToolCallBlock

from ragidx.providers.tokenizer import TokenCounter

__all__ = [
    "MESSAGE_OVERHEAD_TOKENS",
    "NON_TEXT_BLOCK_TOKENS",
    "REPLY_PRIMING_TOKENS",
    "PromptAccountant",
    "WindowLimits",
    "tool_specs",
]

MESSAGE_OVERHEAD_TOKENS = 4
"""Role marker and separators per message (OpenAI's chat format costs 3-4)."""
REPLY_PRIMING_TOKENS = 3
"""Tokens every prompt spends priming the assistant's reply."""
NON_TEXT_BLOCK_TOKENS = 256
"""Flat estimate for an image, audio or document block (their payloads are not text)."""


def tool_specs(tools: Sequence[Any] | None) -> list[dict[str, Any]]:
    """OpenAI function specs of ``tools``: dicts are taken as given, LlamaIndex tools are converted."""
    specs: list[dict[str, Any]] = []
    for tool in tools or ():
        if isinstance(tool, dict):
            specs.append(tool)
            continue
        metadata = getattr(tool, "metadata", None)
        if metadata is None or not hasattr(metadata, "to_openai_tool"):
            raise TypeError(
                f"tool {tool!r} is neither a dict (an OpenAI function spec) nor a LlamaIndex BaseTool; "
                "pass tool.metadata.to_openai_tool() or the tool itself"
            )
        specs.append(metadata.to_openai_tool(skip_length_check=True))
    return specs


@dataclass(frozen=True)
class WindowLimits:
    """The token limits of one call.

    ``hard_limit`` is the most prompt tokens allowed: the window minus the safety margin and the reserved
    output. ``trigger`` and ``target`` never exceed it.

    Example:
        >>> lim = WindowLimits.compute(8192, max_output_tokens=512, margin_pct=0.05,
        ...                            trigger_pct=0.75, target_pct=0.70)
        >>> (lim.margin, lim.hard_limit, lim.trigger, lim.target)
        (410, 7270, 6144, 5734)
    """

    context_window: int
    max_output_tokens: int
    margin_pct: float
    margin: int
    hard_limit: int
    trigger_pct: float
    target_pct: float
    trigger: int
    target: int

    @classmethod
    def compute(
        cls,
        context_window: int,
        *,
        max_output_tokens: int,
        margin_pct: float,
        trigger_pct: float,
        target_pct: float,
    ) -> WindowLimits:
        if context_window <= 0:
            raise ValueError(f"context_window must be positive, got {context_window}")
        if max_output_tokens < 0:
            raise ValueError(f"max_output_tokens must be >= 0, got {max_output_tokens}")
        if not 0 <= margin_pct < 0.5:
            raise ValueError(f"safety margin must be in [0, 0.5), got {margin_pct}")
        if not 0 < target_pct <= trigger_pct <= 1:
            raise ValueError(f"need 0 < target_pct <= trigger_pct <= 1, got target {target_pct}, trigger {trigger_pct}")
        margin = math.ceil(context_window * margin_pct)
        hard = context_window - margin - max_output_tokens
        trigger = min(int(context_window * trigger_pct), hard)
        # When the hard limit binds, keep the target the same fraction below the trigger.
        target = min(int(context_window * target_pct), int(hard * target_pct / trigger_pct))
        return cls(
            context_window=context_window,
            max_output_tokens=max_output_tokens,
            margin_pct=margin_pct,
            margin=margin,
            hard_limit=hard,
            trigger_pct=trigger_pct,
            target_pct=target_pct,
            trigger=trigger,
            target=max(0, target),
        )


class PromptAccountant:
    """Counts the tokens of a whole prompt the way the budget sees it.

    Example:
        >>> acc = PromptAccountant()
        >>> acc.count_prompt([], system_prompt="Be brief.", tools=None)
        10
    """

    def __init__(
        self,
        token_counter: TokenCounter | None = None,
        *,
        message_overhead: int = MESSAGE_OVERHEAD_TOKENS,
        reply_priming: int = REPLY_PRIMING_TOKENS,
    ) -> None:
        self.tokens = token_counter or TokenCounter()
        self.message_overhead = message_overhead
        self.reply_priming = reply_priming

    def count_text(self, text: str) -> int:
        return self.tokens.count(text)

    def count_message(self, message: ChatMessage) -> int:
        """Text blocks, tool-call blocks (and legacy ``additional_kwargs['tool_calls']``), ids, overhead."""
        total = self.message_overhead
        for block in message.blocks:
            if isinstance(block, TextBlock):
                total += self.tokens.count(block.text)
            elif isinstance(block, ToolCallBlock):
                kwargs = block.tool_kwargs
                args = kwargs if isinstance(kwargs, str) else json.dumps(kwargs, ensure_ascii=False)
                total += self.tokens.count(f"{block.tool_call_id or ''}{block.tool_name}{args}") + 3
            elif isinstance(block, ThinkingBlock):
                total += self.tokens.count(block.content or "")
            else:
                total += NON_TEXT_BLOCK_TOKENS
        extra = message.additional_kwargs
        if extra.get("tool_calls"):
            total += self.tokens.count(json.dumps(extra["tool_calls"], ensure_ascii=False, default=str))
        if message.role == MessageRole.TOOL:
            total += self.tokens.count(f"{extra.get('tool_call_id', '')}{extra.get('name', '')}")
        return total

    def count_messages(self, messages: Sequence[ChatMessage]) -> int:
        return sum(self.count_message(m) for m in messages)

    def count_system(self, system_prompt: str | None) -> int:
        """A system prompt passed beside the messages costs what a system message would."""
        if not system_prompt:
            return 0
        return self.message_overhead + self.tokens.count(system_prompt)

    def count_tools(self, tools: Sequence[Any] | None) -> int:
        """Tool schemas are sent as JSON of their OpenAI function specs."""
        specs = tool_specs(tools)
        if not specs:
            return 0
        return self.tokens.count(json.dumps(specs, ensure_ascii=False))

    def count_prompt(
        self,
        messages: Sequence[ChatMessage],
        *,
        system_prompt: str | None = None,
        tools: Sequence[Any] | None = None,
    ) -> int:
        """Everything sent: reply priming + system prompt + tool schemas + all messages."""
        return (
            self.reply_priming
            + self.count_system(system_prompt)
            + self.count_tools(tools)
            + self.count_messages(messages)
        )
