"""A turn's typed state: the pieces it starts with and the Answer it becomes."""

from __future__ import annotations

from llama_index.core.base.llms.types import ChatMessage, MessageRole

from ragidx.agent.guards import Fired
from ragidx.agent.turn import Turn
from tests.fakes.scripted_llm import ScriptedLLM


def test_a_turn_starts_empty_and_its_answer_reports_what_it_counted() -> None:
    llm = ScriptedLLM([])
    question = ChatMessage(role=MessageRole.USER, content="How do I insert a table?")
    turn = Turn.start("How do I insert a table?", "s1", [question], llm=llm, window=4096, max_out=256)
    assert (turn.searches.rounds, turn.searches.queries, turn.gate.reason, turn.model.shrink) == (0, [], None, 0)
    assert turn.usage.timings == {"retrieval": 0.0, "hook": 0.0, "llm": 0.0}

    turn.searches.queries.append("insert table")
    turn.usage.prompt_tokens += [120, 300]
    turn.usage.raw_prompt_tokens += [150, 900]
    turn.usage.completion_tokens = 40
    turn.model.prompt_cap = 768
    turn.gate.fired.append(Fired("source_talk", "stripped a closing source line"))
    answer = turn.answer("Choose Table > Insert Table.", [], "none", [], not_found=False, reason=None,
                         guard_profile={"profile": "endpoint"})  # fmt: skip

    assert answer.question == "How do I insert a table?" and answer.session_id == "s1"
    assert answer.model == "scripted" and answer.queries == ["insert table"]
    assert answer.tokens == {
        "prompt_per_call": [120, 300],
        "prompt_total": 420,
        "prompt_max": 300,
        "prompt_raw_per_call": [150, 900],
        "prompt_raw_total": 1050,
        "completion": 40,
        "prompt_cap": 768,
    }
    assert "total" in answer.timings and answer.guards[0]["name"] == "source_talk"
    assert answer.guard_profile == {"profile": "endpoint"}
    answer.queries.append("changed")
    assert turn.searches.queries == ["insert table"]  # the answer holds copies, not the turn's lists
