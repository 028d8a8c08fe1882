from __future__ import annotations

import copy

from llama_index.core.base.llms.types import ChatMessage, MessageRole

from ragidx.budget.memory import SUMMARY_PREFIX, ConversationMemory
from ragidx.budget.messages import tool_results
from tests.budget.helpers import article, assistant, tool_call, tool_result, user
from tests.fakes.scripted_llm import ScriptedLLM, text_of


def history() -> list[ChatMessage]:
    return [
        ChatMessage(role=MessageRole.SYSTEM, content="You are helpful."),
        user("How do I print?"),
        tool_call("c1"),
        tool_result("c1", [article("p1", 0.9, "Printing guide text.", title="Printing")]),
        assistant("Use File > Print."),
        user("And export?"),
        tool_call("c2"),
        tool_result("c2", [article("e1", 0.8, "Export guide.", title="Export")]),
    ]


def test_cut_moves_before_tool_call_group() -> None:
    h = history()
    lead, cut = ConversationMemory(keep_last=2).cut_index(h)
    assert (lead, cut) == (1, 6)  # keeps the call c2 with its result, not just the result
    result = ConversationMemory(keep_last=2).summarize(h)
    assert result.messages[0] is h[0]
    assert result.messages[2:] == h[6:]
    assert result.summarized_messages == 5


def test_llm_summary_message_and_prompt() -> None:
    llm = ScriptedLLM(["User asked how to print; answer: File > Print (source: Printing)."])
    h = history()
    result = ConversationMemory(llm, keep_last=2).summarize(h, question="And export?", results=tool_results(h))
    summary = result.messages[1]
    assert summary.role == MessageRole.USER
    assert summary.content == SUMMARY_PREFIX + "User asked how to print; answer: File > Print (source: Printing)."
    prompt = text_of(llm.calls[0].messages[0])
    assert "How do I print?" in prompt and "And export?" in prompt
    assert "tool: retrieved: Printing (https://kb.example/p1)" in prompt  # a search result: its titles
    assert result.method == "llm"


def test_llm_failure_falls_back_to_extractive_and_input_untouched() -> None:
    h = history()
    frozen = copy.deepcopy([m.model_dump() for m in h])
    result = ConversationMemory(ScriptedLLM([RuntimeError("down")]), keep_last=2).summarize(h, summary_tokens=60)
    assert result.method == "extractive_fallback"
    text = result.messages[1].content or ""
    assert "File > Print" in text
    assert result.summary_tokens <= 60 + 10
    assert [m.model_dump() for m in h] == frozen


def test_nothing_to_summarize() -> None:
    short = [user("hi"), assistant("hello")]
    result = ConversationMemory(keep_last=2).summarize(short)
    assert result.summarized_messages == 0 and result.messages == short
