"""Replay re-runs a recorded rerank offline so prompt and parser changes can be checked on real traffic."""

from __future__ import annotations

import json
from pathlib import Path

from ragidx.retrieval.flash import (
    FlashDecision,
    FlashReranker,
    FlashTrace,
    ReplayLLM,
    SelectionSource,
    replay,
)
from ragidx.retrieval.flash.replay import ReplayExhaustedError
from ragidx.retrieval.flash.trace import TraceToolCall
from tests.fakes.scripted_llm import ScriptedLLM, text_of
from tests.retrieval.flash.helpers import SlowScriptedLLM, article_nodes, kb, make_reranker, tool_call

ANSWER = json.dumps({"topics": [{"id": 5, "reason": "a"}, {"id": 2, "reason": "b"}, {"id": 3, "reason": "c"}]})


def _record(script: list, tmp_path: Path, **settings) -> FlashTrace:
    result = make_reranker(ScriptedLLM(script), **settings).rerank_detailed("q", article_nodes(8))
    assert result.trace is not None
    return FlashTrace.load(result.trace.save(tmp_path / "trace.json"))


def test_replay_reproduces_the_recorded_decision_and_prompts(tmp_path: Path) -> None:
    trace = _record([tool_call(5, 2, 3), ANSWER], tmp_path)
    llm_box: list[ReplayLLM] = []

    def factory(llm):
        llm_box.append(llm)
        return FlashReranker(llm)

    result = replay(trace, factory)

    assert (result.decision, result.selected_kb_ids) == (trace.decision, trace.selected_kb_ids)
    assert result.selected_kb_ids == kb(5, 2, 3)
    # the same prompts were sent again (same date, query, candidates)
    sent_turn1 = [text_of(m) for m in llm_box[0].sent[0]]
    assert sent_turn1 == [m.content for m in trace.turns[0].new_messages]


def test_replay_with_a_changed_reranker_shows_the_difference(tmp_path: Path) -> None:
    trace = _record([tool_call(5, 2, 3), ANSWER], tmp_path)

    result = replay(trace, lambda llm: FlashReranker(llm, top_n=2))

    assert result.selected_kb_ids == kb(5, 2)
    assert result.selected_kb_ids != trace.selected_kb_ids


def test_replay_defaults_to_the_recorded_settings(tmp_path: Path) -> None:
    trace = _record([ANSWER], tmp_path, top_n=1)
    assert replay(trace).selected_kb_ids == kb(5)


def test_recorded_api_errors_and_timeouts_replay_to_the_same_fallback(tmp_path: Path) -> None:
    api = _record([tool_call(4), RuntimeError("503")], tmp_path)
    replayed = replay(api)
    assert (replayed.decision, replayed.source) == (FlashDecision.API_ERROR, SelectionSource.UPSTREAM)
    assert replayed.selected_kb_ids == api.selected_kb_ids == kb(1, 2, 3, 4, 5)

    slow = SlowScriptedLLM([ANSWER], delays=[1.0])
    timed_out = make_reranker(slow, timeout_s=0.1).rerank_detailed("q", article_nodes(8)).trace
    assert timed_out is not None
    replayed = replay(timed_out)
    assert (replayed.decision, replayed.source) == (FlashDecision.TIMEOUT, SelectionSource.UPSTREAM)


def test_a_reranker_needing_more_turns_than_recorded_fails_visibly(tmp_path: Path) -> None:
    trace = _record(["no json"], tmp_path)
    # Pretend the recorded reply was a tool call: the replayed run then wants a second response.
    assert trace.turns[0].response is not None
    trace.turns[0].response.text = ""
    trace.turns[0].response.tool_calls = [TraceToolCall(id="c1", name="get_topics_content", arguments={"ids": [1]})]

    result = replay(trace)

    assert result.decision is FlashDecision.API_ERROR
    assert ReplayExhaustedError.__name__ in (result.error or "")


def test_recorded_settings_this_version_lacks_are_ignored_on_replay(tmp_path: Path, caplog) -> None:
    trace = _record([ANSWER], tmp_path, top_n=2)
    trace.settings["setting_from_another_version"] = True

    result = replay(trace)

    assert result.selected_kb_ids == kb(5, 2)
    assert "setting_from_another_version" in caplog.text
