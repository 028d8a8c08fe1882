from __future__ import annotations

import re

import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.tools import FunctionTool

from ragidx.budget.accounting import MESSAGE_OVERHEAD_TOKENS, PromptAccountant, tool_specs
from tests.budget.helpers import retrieve_tool_spec, tool_call, tool_result

ACC = PromptAccountant()


def test_message_costs_text_plus_overhead() -> None:
    msg = ChatMessage(role=MessageRole.USER, content="hello world")
    assert ACC.count_message(msg) == ACC.tokens.count("hello world") + MESSAGE_OVERHEAD_TOKENS


def test_tool_calls_and_tool_ids_are_counted() -> None:
    short, long = tool_call("c1", query="x"), tool_call("c1", query="x " * 200)
    assert ACC.count_message(long) > ACC.count_message(short) + 150
    assert ACC.count_message(tool_call("c1", "c2")) > ACC.count_message(tool_call("c1"))
    result = tool_result("call_123456789", [])
    bare = ChatMessage(role=MessageRole.TOOL, content=result.content)
    assert ACC.count_message(result) > ACC.count_message(bare)


def test_tools_as_dicts_or_llamaindex_tools_cost_the_same() -> None:
    def retrieve_context(query: str, top_k: int = 5) -> str:
        """Search the knowledge base and return whole ranked articles."""
        return query

    tool = FunctionTool.from_defaults(retrieve_context)
    spec = tool.metadata.to_openai_tool()
    assert tool_specs([tool]) == [spec]
    assert ACC.count_tools([tool]) == ACC.count_tools([spec]) > 20
    assert ACC.count_tools(None) == 0


def test_unknown_tool_type_is_rejected_with_advice() -> None:
    with pytest.raises(TypeError, match=re.escape("pass tool.metadata.to_openai_tool() or the tool itself")):
        tool_specs([object()])


def test_prompt_is_sum_of_parts() -> None:
    msgs = [ChatMessage(role="user", content="a question"), tool_call("c1")]
    total = ACC.count_prompt(msgs, tools=[retrieve_tool_spec()])
    assert total == ACC.reply_priming + ACC.count_tools([retrieve_tool_spec()]) + sum(map(ACC.count_message, msgs))
