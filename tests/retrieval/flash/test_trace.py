"""A rerank's trace round-trips through JSON and keeps what a replay and a reviewer need."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragidx.retrieval.flash import FlashDecision, FlashTrace, SelectionSource
from tests.fakes.scripted_llm import ScriptedLLM
from tests.retrieval.flash.helpers import article_nodes, kb, make_reranker, tool_call


def _traced_run() -> FlashTrace:
    llm = ScriptedLLM([tool_call(4, 2), json.dumps({"topics": [{"id": 4, "reason": "covers it"}]})])
    result = make_reranker(llm).rerank_detailed("rotate keys", article_nodes(6), user_facts=["admin"])
    assert result.trace is not None
    return result.trace


def test_trace_records_prompts_responses_tool_calls_and_decision() -> None:
    trace = _traced_run()

    assert (trace.decision, trace.source, trace.selected_kb_ids) == (
        FlashDecision.ACCEPTED,
        SelectionSource.MODEL,
        kb(4),
    )
    assert trace.reasons == ["covers it"]
    assert [m.role for m in trace.turns[0].new_messages] == ["system", "user"]
    assert "rotate keys" in trace.turns[0].new_messages[1].content
    assert trace.turns[0].response is not None
    assert trace.turns[0].response.tool_calls[0].arguments == {"ids": [4, 2]}
    assert [m.role for m in trace.turns[1].new_messages] == ["assistant", "tool"]
    assert "<<<CONTENT id=4>>>" in trace.turns[1].new_messages[1].content
    assert trace.turns[1].response is not None and "covers it" in trace.turns[1].response.text
    assert [c.kb_id for c in trace.candidates] == kb(1, 2, 3, 4, 5, 6)
    assert trace.settings["top_n"] == 5
    assert trace.today == "2026-01-04"


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    trace = _traced_run()
    path = trace.save(tmp_path / "sub" / "trace.json")

    assert FlashTrace.load(path) == trace


def test_traces_from_a_newer_version_are_refused_with_advice(tmp_path: Path) -> None:
    trace = _traced_run().model_copy(update={"version": 99})
    path = trace.save(tmp_path / "t.json")
    with pytest.raises(ValueError, match="upgrade ragidx"):
        FlashTrace.load(path)


def test_trace_dir_saves_every_rerank(tmp_path: Path) -> None:
    llm = ScriptedLLM(["[1]", "[2]"])
    flash = make_reranker(llm, trace_dir=str(tmp_path))
    flash.rerank_detailed("q", article_nodes(3))
    flash.rerank_detailed("q", article_nodes(3))

    saved = sorted(tmp_path.glob("flash-*.json"))
    assert len(saved) == 2
    assert {tuple(FlashTrace.load(p).selected_kb_ids) for p in saved} == {("kb-1",), ("kb-2",)}


def test_trace_nodes_rebuild_the_candidates() -> None:
    trace = _traced_run()
    nodes = trace.to_nodes()
    originals = article_nodes(6)

    assert [n.node.get_content() for n in nodes] == [n.node.get_content() for n in originals]
    assert [n.node.metadata["title"] for n in nodes] == [n.node.metadata["title"] for n in originals]
