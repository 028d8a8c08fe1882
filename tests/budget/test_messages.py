from __future__ import annotations

import json

from llama_index.core.base.llms.types import ChatMessage, MessageRole

from ragidx.budget.messages import (
    content_segment,
    current_turn_start,
    group_spans,
    parse_tool_payload,
    replace_text,
)
from tests.budget.helpers import assistant, tool_call, tool_result, user


def tool(text: str) -> ChatMessage:
    return ChatMessage(role=MessageRole.TOOL, content=text, additional_kwargs={"tool_call_id": "c"})


def test_only_article_results_parse() -> None:
    assert parse_tool_payload(tool_result("c", []))["articles"] == []  # type: ignore[index]
    assert parse_tool_payload(tool(json.dumps({"error": "x", "metadata": {}}))) is None
    assert parse_tool_payload(tool("plain text")) is None
    assert parse_tool_payload(tool("{broken")) is None
    assert parse_tool_payload(tool(json.dumps({"articles": ["not a dict"]}))) is None
    assert parse_tool_payload(user(json.dumps({"articles": []}))) is None


def test_groups_keep_calls_with_results() -> None:
    msgs = [
        user("a"),
        tool_call("1", "2"),
        tool_result("1", []),
        tool_result("2", []),
        assistant("b"),
        user("c"),
    ]
    assert [list(s) for s in group_spans(msgs)] == [[0], [1, 2, 3], [4], [5]]
    assert current_turn_start(msgs) == 5
    assert current_turn_start([assistant("x")]) == 1


def test_replace_text_copies_kwargs() -> None:
    original = tool_result("c9", [])
    new = replace_text(original, "{}")
    assert new.content == "{}" and new.additional_kwargs == original.additional_kwargs
    new.additional_kwargs["name"] = "changed"
    assert original.additional_kwargs["name"] == "retrieve_context"


def test_content_segment_is_what_json_writes() -> None:
    text = 'Line "1"\nnext'
    assert content_segment(text) == " " + json.dumps(text, ensure_ascii=False) + ","
    assert content_segment('Say "hi"') == ' "Say \\"hi\\"",'
