from __future__ import annotations

import re

import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.tools import FunctionTool

from ragidx.budget.accounting import MESSAGE_OVERHEAD_TOKENS, PromptAccountant, WindowLimits, tool_specs
from tests.budget.helpers import retrieve_tool_spec, tool_call, tool_result

ACC = PromptAccountant()


def test_message_costs_text_plus_overhead() -> None:
    msg = ChatMessage(role=MessageRole.USER, content="hello world")
    assert ACC.count_message(msg) == ACC.count_text("hello world") + MESSAGE_OVERHEAD_TOKENS


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
    total = ACC.count_prompt(msgs, system_prompt="sys", tools=[retrieve_tool_spec()])
    assert total == (
        ACC.reply_priming + ACC.count_system("sys") + ACC.count_tools([retrieve_tool_spec()]) + ACC.count_messages(msgs)
    )


def test_window_limits_reserve_margin_and_output() -> None:
    lim = WindowLimits.compute(10_000, max_output_tokens=1000, margin_pct=0.05, trigger_pct=0.85, target_pct=0.80)
    assert (lim.margin, lim.hard_limit, lim.trigger, lim.target) == (500, 8500, 8500, 8000)
    tight = WindowLimits.compute(4096, max_output_tokens=2048, margin_pct=0.05, trigger_pct=0.75, target_pct=0.70)
    assert tight.target <= tight.trigger <= tight.hard_limit == 4096 - 205 - 2048
    with pytest.raises(ValueError, match=re.escape("need 0 < target_pct <= trigger_pct <= 1")):
        WindowLimits.compute(4096, max_output_tokens=1, margin_pct=0.05, trigger_pct=0.5, target_pct=0.7)
