"""Token accounting of everything an LLM call sends: tool schemas and messages.

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
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ThinkingBlock, ToolCallBlock

from ragidx.providers.tokenizer import TokenCounter

__all__ = [
    "MESSAGE_OVERHEAD_TOKENS",
    "NON_TEXT_BLOCK_TOKENS",
    "REPLY_PRIMING_TOKENS",
    "PromptAccountant",
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


class PromptAccountant:
    """Counts the tokens of a whole prompt the way the budget sees it.

    Example:
        >>> acc = PromptAccountant()
        >>> acc.count_prompt([ChatMessage(role="system", content="Be brief.")])
        10
    """

    message_overhead = MESSAGE_OVERHEAD_TOKENS
    reply_priming = REPLY_PRIMING_TOKENS

    def __init__(self, token_counter: TokenCounter | None = None) -> None:
        self.tokens = token_counter or TokenCounter()

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

    def count_tools(self, tools: Sequence[Any] | None) -> int:
        """Tool schemas are sent as JSON of their OpenAI function specs."""
        specs = tool_specs(tools)
        if not specs:
            return 0
        return self.tokens.count(json.dumps(specs, ensure_ascii=False))

    def count_prompt(self, messages: Sequence[ChatMessage], *, tools: Sequence[Any] | None = None) -> int:
        """Everything sent: reply priming + tool schemas + all messages."""
        return self.reply_priming + self.count_tools(tools) + sum(self.count_message(m) for m in messages)
