import asyncio

import pytest

from tests.fakes.scripted_llm import ScriptedLLM, ToolCall, text_of


def test_script_steps_in_order_and_records_calls() -> None:
    llm = ScriptedLLM([ToolCall("retrieve_context", {"query": "tables"}), "final"])
    first = llm.chat([])
    calls = llm.get_tool_calls_from_response(first)
    assert calls[0].tool_name == "retrieve_context"
    assert calls[0].tool_kwargs == {"query": "tables"}
    second = asyncio.run(llm.achat([]))
    assert text_of(second.message) == "final"
    assert len(llm.calls) == 2
    with pytest.raises(AssertionError, match="ran out of script"):
        llm.chat([])


def test_callable_and_exception_steps() -> None:
    llm = ScriptedLLM([lambda msgs, call: f"saw {len(msgs)}", TimeoutError("slow")])
    assert text_of(llm.chat([]).message) == "saw 0"
    with pytest.raises(TimeoutError):
        llm.chat([])
