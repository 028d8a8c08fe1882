from __future__ import annotations

import json

from llama_index.core.base.llms.types import ChatMessage, MessageRole

from ragidx.budget.messages import (
    SegmentMemo,
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


def test_segment_memo_is_bounded_and_returns_what_json_writes() -> None:
    memo = SegmentMemo(max_entries=3, max_chars=300)
    texts = [f'Line "{i}"\nnext ' * 10 for i in range(5)]  # 140 characters each
    for t in texts:
        assert memo.get(t) == " " + json.dumps(t, ensure_ascii=False) + ","
    assert len(memo) == 2  # three would pass 300 characters
    assert memo.get(texts[-1]) is memo.get(texts[-1])  # remembered
    huge = "x" * 400
    assert memo.get(huge) == f' "{huge}",' and len(memo) == 2  # larger than the memo: not kept
    memo.clear()
    assert len(memo) == 0
    assert content_segment('Say "hi"') == ' "Say \\"hi\\"",'
