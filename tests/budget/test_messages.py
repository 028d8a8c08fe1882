from __future__ import annotations

import json

from llama_index.core.base.llms.types import ChatMessage, MessageRole

from ragidx.article import SearchResult
from ragidx.budget.messages import current_turn_start, group_spans, tool_results, with_results
from tests.budget.helpers import article, assistant, tool_call, tool_result, user


def tool(text: str) -> ChatMessage:
    return ChatMessage(role=MessageRole.TOOL, content=text, additional_kwargs={"tool_call_id": "c"})


def test_only_article_results_parse() -> None:
    assert tool_results([tool_result("c", [])])["c"].articles == ()
    assert tool_results([tool(json.dumps({"error": "x", "metadata": {}}))]) == {}
    assert tool_results([tool("plain text")]) == {}
    assert tool_results([tool("{broken")]) == {}
    assert tool_results([tool(json.dumps({"articles": ["not a dict"]}))]) == {}
    assert tool_results([user(json.dumps({"articles": []}))]) == {}


def test_results_are_written_back_as_json_unless_unchanged() -> None:
    msgs = [tool_call("c1", "c2"), tool_result("c1", [article("a", 0.5, "A")]), tool_result("c2", [])]
    parsed = tool_results(msgs)
    changed = {"c1": SearchResult(parsed["c1"].articles, {"query": "new"}), "c2": parsed["c2"]}
    out = with_results(msgs, changed, parsed)
    assert out[0] is msgs[0] and out[2] is msgs[2]  # not a result, and the very result it came with
    assert json.loads(out[1].content or "")["metadata"] == {"query": "new"}
    assert out[1].additional_kwargs == msgs[1].additional_kwargs
    out[1].additional_kwargs["name"] = "changed"  # a copy: the message it came from keeps its own
    assert msgs[1].additional_kwargs["name"] == "retrieve_context"


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
