"""FlashReranker protocol tests with a scripted LLM: the fallback ladder, limits, outputs, events."""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.llms import MockLLM
from llama_index.core.schema import MetadataMode

from ragidx.article import RERANK_SCORE
from ragidx.retrieval.flash import (
    FlashDecision,
    FlashReranker,
    JsonRepair,
    QueryContextualizer,
    SelectionSource,
    flash_conversation,
)
from tests.fakes.scripted_llm import ScriptedLLM, ToolCall
from tests.retrieval.flash.helpers import (
    FakeClock,
    SlowScriptedLLM,
    UsageScriptedLLM,
    article_node,
    article_nodes,
    kb,
    make_reranker,
    sent_text,
    tool_call,
    tool_results,
)

D = FlashDecision
S = SelectionSource


def answer(*items: Any) -> str:
    topics = [item if isinstance(item, dict) else {"id": item, "reason": f"reason {item}"} for item in items]
    return json.dumps({"topics": topics})


# --- the fallback ladder -----------------------------------------------------------------------------

LADDER = [
    # (name, script, expected decision, expected source, expected kb ids)
    ("json_without_tool", [answer(4, 2)], D.ACCEPTED, S.MODEL, kb(4, 2)),
    ("json_after_tool", [tool_call(4, 2, 9), answer(9, 4)], D.ACCEPTED, S.MODEL, kb(9, 4)),
    (
        "invalid_json_after_tool",
        [tool_call(8, 3, 5, 1, 7, 2, 6), "Sorry, I cannot decide."],
        D.INVALID_JSON,
        S.TOOL_REQUESTS,
        kb(8, 3, 5, 1, 7),
    ),
    ("invalid_json_without_tool", ["Article 4 looks best."], D.INVALID_JSON, S.UPSTREAM, kb(1, 2, 3, 4, 5)),
    (
        "too_many_tool_calls",
        [tool_call(8), tool_call(3), tool_call(6), tool_call(7)],
        D.TOO_MANY_TOOL_CALLS,
        S.TOOL_REQUESTS,
        kb(8, 3, 6),
    ),
    ("api_error_before_tool", [RuntimeError("502 bad gateway")], D.API_ERROR, S.UPSTREAM, kb(1, 2, 3, 4, 5)),
    ("api_error_after_tool", [tool_call(9, 8), RuntimeError("502")], D.API_ERROR, S.UPSTREAM, kb(1, 2, 3, 4, 5)),
    ("llm_timeout_error", [TimeoutError("read timed out")], D.TIMEOUT, S.UPSTREAM, kb(1, 2, 3, 4, 5)),
    ("all_ids_invented", [answer(77, 88)], D.INVENTED_IDS, S.UPSTREAM, kb(1, 2, 3, 4, 5)),
    ("invented_after_tool", [tool_call(6), answer(77)], D.INVENTED_IDS, S.TOOL_REQUESTS, kb(6)),
]


@pytest.mark.parametrize(
    ("script", "decision", "source", "kb_ids"),
    [pytest.param(*row[1:], id=row[0]) for row in LADDER],
)
def test_fallback_ladder(
    script: list[Any], decision: FlashDecision, source: SelectionSource, kb_ids: list[str]
) -> None:
    flash = make_reranker(ScriptedLLM(script))

    result = flash.rerank_detailed("query", article_nodes(10))

    assert (result.decision, result.source) == (decision, source)
    assert result.selected_kb_ids == kb_ids
    assert [n.node.metadata["kb_id"] for n in result.nodes] == kb_ids
    assert result.is_fallback is (decision is not D.ACCEPTED)


def test_timeout_before_any_tool_call_falls_back_to_upstream_order() -> None:
    llm = SlowScriptedLLM([answer(3)], delays=[2.0])
    flash = make_reranker(llm, timeout_s=0.2)

    started = time.perf_counter()
    result = flash.rerank_detailed("query", article_nodes(10))

    assert time.perf_counter() - started < 1.5
    assert (result.decision, result.source) == (D.TIMEOUT, S.UPSTREAM)
    assert result.selected_kb_ids == kb(1, 2, 3, 4, 5)


def test_timeout_is_one_budget_shared_across_turns() -> None:
    # Each turn alone fits in the budget; the two together do not.
    llm = SlowScriptedLLM([tool_call(7, 2), answer(7)], delays=[0.35, 0.35])
    flash = make_reranker(llm, timeout_s=0.5)

    started = time.perf_counter()
    result = flash.rerank_detailed("query", article_nodes(10))

    assert time.perf_counter() - started < 1.0
    assert (result.decision, result.source) == (D.TIMEOUT, S.TOOL_REQUESTS)
    assert result.selected_kb_ids == kb(7, 2)


def test_spent_budget_stops_before_the_next_llm_call() -> None:
    clock = FakeClock()

    def slow_tool_call(messages: list[ChatMessage], call: Any) -> ToolCall:
        clock.advance(10.5)
        return tool_call(4)

    llm = ScriptedLLM([slow_tool_call, answer(4)])
    flash = make_reranker(llm, timeout_s=10.0)
    flash._clock = clock  # the injected clock; see the constructor's `clock=` argument

    result = flash.rerank_detailed("query", article_nodes(10))

    assert len(llm.calls) == 1
    assert (result.decision, result.source) == (D.TIMEOUT, S.TOOL_REQUESTS)
    assert result.duration_s == pytest.approx(10.5)


def test_clock_argument_is_used_for_the_budget() -> None:
    clock = FakeClock()

    def slow(messages: list[ChatMessage], call: Any) -> ToolCall:
        clock.advance(3.0)
        return tool_call(1)

    llm = ScriptedLLM([slow, slow, slow, answer(1)])
    flash = FlashReranker(llm, clock=clock, timeout_s=8.0)

    result = flash.rerank_detailed("query", article_nodes(3))

    assert len(llm.calls) == 3
    assert result.decision is D.TIMEOUT


def test_after_the_last_allowed_tool_call_the_model_is_told_to_answer() -> None:
    llm = ScriptedLLM([tool_call(1), tool_call(2), answer(2, 1)])
    flash = make_reranker(llm, max_tool_calls=2)

    result = flash.rerank_detailed("query", article_nodes(5))

    assert result.decision is D.ACCEPTED
    assert result.tool_calls == 2
    last_message = llm.calls[2].messages[-1]
    assert last_message.role is MessageRole.USER
    assert "used all 2 get_topics_content calls" in (last_message.content or "")


# --- selection rules ---------------------------------------------------------------------------------


def test_empty_selection_is_honoured() -> None:
    result = make_reranker(ScriptedLLM([tool_call(1, 2), '{"topics": []}'])).rerank_detailed("query", article_nodes(10))

    assert (result.decision, result.source) == (D.ACCEPTED, S.MODEL)
    assert result.nodes == []
    assert not result.is_fallback


def test_invented_ids_are_dropped_and_counted() -> None:
    llm = ScriptedLLM([tool_call(3, 99, "ID:4"), answer(42, 3, 4, 42)])
    result = make_reranker(llm).rerank_detailed("query", article_nodes(10))

    assert result.decision is D.ACCEPTED
    assert result.selected_kb_ids == kb(3, 4)
    assert result.invented_ids == [99, 42]
    assert result.invented_count == 2
    assert "Not in the candidate list (ignored): 99." in tool_results(llm, 1)[0]


def test_duplicates_are_deduped_and_selection_is_capped_at_top_n() -> None:
    llm = ScriptedLLM([answer(5, 5, 4, 3, 2, 1, 6)])
    result = make_reranker(llm, top_n=3).rerank_detailed("query", article_nodes(10))

    assert result.selected_kb_ids == kb(5, 4, 3)


def test_ids_beyond_the_shown_candidates_are_invented() -> None:
    llm = ScriptedLLM([answer(12, 2)])
    result = make_reranker(llm, max_candidates=10).rerank_detailed("query", article_nodes(20))

    assert result.selected_kb_ids == kb(2)
    assert result.invented_ids == [12]
    assert sum(line.startswith("[ID:") for line in sent_text(llm, 0).splitlines()) == 10
    assert result.candidates_shown == 10


def test_healing_repairs_are_reported_on_the_result() -> None:
    llm = ScriptedLLM(["```json\n{'topics': [{'id': 'ID:2', 'reason': 'r'},]}\n```"])
    result = make_reranker(llm).rerank_detailed("query", article_nodes(5))

    assert result.selected_kb_ids == kb(2)
    assert set(result.repairs) == {
        JsonRepair.MARKDOWN_FENCE,
        JsonRepair.SINGLE_QUOTES,
        JsonRepair.TRAILING_COMMA,
        JsonRepair.STRING_IDS,
    }


def test_legacy_plain_list_is_accepted() -> None:
    result = make_reranker(ScriptedLLM(["[3, 1]"])).rerank_detailed("query", article_nodes(5))
    assert (result.decision, result.selected_kb_ids) == (D.ACCEPTED, kb(3, 1))


def test_repeated_tool_requests_are_not_loaded_twice() -> None:
    llm = ScriptedLLM([tool_call(2, 3), tool_call(3, 4), answer(4)])
    result = make_reranker(llm).rerank_detailed("query", article_nodes(5))

    second = tool_results(llm, 2)[-1]
    assert "<<<CONTENT id=3>>>" not in second
    assert "<<<CONTENT id=4>>>" in second
    assert "Already loaded above: 3." in second
    assert result.requested_ids == [2, 3, 4]


def test_with_a_context_window_loaded_content_is_cut_at_paragraphs_so_the_prompt_fits() -> None:
    from ragidx.providers.tokenizer import TokenCounter

    paragraphs = [f"Paragraph {p} of article {{i}} says something useful about setting {p}." for p in range(300)]
    long_nodes = [article_node(i, text="\n\n".join(paragraphs).replace("{i}", str(i))) for i in range(1, 4)]
    llm = ScriptedLLM([tool_call(1, 2, 3), answer(2)])
    flash = make_reranker(llm, context_window=4096, max_output_tokens=400)

    result = flash.rerank_detailed("query", long_nodes)

    tokens = TokenCounter()
    sent = sum(tokens.count(m.content or "") for m in llm.calls[1].messages)
    assert sent + 400 <= 4096
    assert result.decision is D.ACCEPTED and result.selected_kb_ids == kb(2)
    shown = tool_results(llm, 1)[-1]
    for i in (1, 2, 3):  # every requested article gets an equal share, cut after a whole paragraph
        body = shown.split(f"<<<CONTENT id={i}>>>")[1].split("<<<END CONTENT")[0]
        kept, note = body.rsplit("\n\n", 1)
        assert note.startswith("[cut to fit the context:")
        assert re.fullmatch(
            rf"Paragraph \d+ of article {i} says something useful about setting \d+\.", kept.split("\n\n")[-1]
        )


def test_without_a_context_window_content_is_sent_whole() -> None:
    text = "\n\n".join(f"Paragraph {p}." for p in range(2000))
    llm = ScriptedLLM([tool_call(1), answer(1)])
    make_reranker(llm).rerank_detailed("query", [article_node(1, text=text)])
    assert "Paragraph 1999." in tool_results(llm, 1)[-1]
    assert "cut to fit" not in tool_results(llm, 1)[-1]


def test_tool_ids_given_as_a_string_are_understood() -> None:
    llm = ScriptedLLM([ToolCall("get_topics_content", {"ids": "[2, 3]"}), answer(2)])
    make_reranker(llm).rerank_detailed("query", article_nodes(5))
    assert "<<<CONTENT id=2>>>" in tool_results(llm, 1)[0]
    assert "<<<CONTENT id=3>>>" in tool_results(llm, 1)[0]


def test_unknown_tool_gets_an_error_result_and_counts_as_a_call() -> None:
    llm = ScriptedLLM([ToolCall("search_web", {"q": "x"}), answer(1)])
    result = make_reranker(llm).rerank_detailed("query", article_nodes(3))

    assert "Unknown tool 'search_web'" in tool_results(llm, 1)[0]
    assert result.tool_calls == 1
    assert result.decision is D.ACCEPTED


# --- outputs -----------------------------------------------------------------------------------------


def test_output_nodes_are_new_in_model_order_with_reason_and_position_score() -> None:
    nodes = article_nodes(6)
    before = [(n.node.metadata.copy(), n.score) for n in nodes]
    result = make_reranker(ScriptedLLM([answer(5, 2, 6, 1)])).rerank_detailed("query", nodes)

    assert [(n.node.metadata["kb_id"], n.score) for n in result.nodes] == [
        ("kb-5", 1.0),
        ("kb-2", 0.75),
        ("kb-6", 0.5),
        ("kb-1", 0.25),
    ]
    first = result.nodes[0].node
    assert first.metadata["flash_reason"] == "reason 5"
    assert first.metadata[RERANK_SCORE] == 1.0
    assert first.metadata["flash_rank"] == 1
    assert first is not nodes[4].node
    assert [(n.node.metadata, n.score) for n in nodes] == before
    # flash metadata stays out of the text the answering LLM and the embedder see
    assert "reason 5" not in first.get_content(metadata_mode=MetadataMode.LLM)
    assert "Topic 5" in first.get_content(metadata_mode=MetadataMode.LLM)


def test_excerpts_are_kept_only_for_large_articles_and_snapped_to_paragraphs() -> None:
    big_text = "Filler paragraph.\n\n" * 40 + "The fix is to set max_batch=8. Restart after.\n\n" + "End."
    nodes = [article_node(1, text=big_text), article_node(2)]
    llm = ScriptedLLM(
        [
            answer(
                {"id": 1, "reason": "has the fix", "excerpt": "The fix is to set max_batch=8."},
                {"id": 2, "reason": "small", "excerpt": "Article 2 explains"},
            )
        ]
    )
    flash = make_reranker(llm, excerpt_threshold_chars=500)

    result = flash.rerank_detailed("query", nodes)

    assert result.nodes[0].node.metadata["flash_excerpt"] == "The fix is to set max_batch=8. Restart after."
    assert "flash_excerpt" not in result.nodes[1].node.metadata
    assert result.selections[1].excerpt is None
    assert result.excerpts_dropped == 1


def _excerpt_run(**settings: Any) -> tuple[Any, str]:
    big_text = "Filler paragraph.\n\n" * 400 + "The fix is to set max_batch=8. Restart after.\n\n" + "End."
    nodes = [article_node(1, text=big_text, url="https://kb/1"), article_node(2)]
    llm = ScriptedLLM([answer({"id": 1, "reason": "has the fix", "excerpt": "The fix is to set max_batch=8."}, 2)])
    return make_reranker(llm, excerpt_threshold_chars=500, **settings).rerank_detailed("query", nodes), big_text


def test_an_excerpt_replaces_a_large_articles_text_marked_with_where_the_whole_is() -> None:
    result, big_text = _excerpt_run()
    node = result.nodes[0].node
    text = node.get_content()

    assert text.startswith('[Excerpt: the passages of "Topic 1" (')
    assert f"({len(big_text)} characters in all)" in text and "kb_id kb-1, https://kb/1]" in text
    assert text.endswith("The fix is to set max_batch=8. Restart after.")
    assert "Filler paragraph." not in text
    assert len(text) < len(big_text) / 20
    assert node.metadata["flash_excerpt_of_chars"] == len(big_text)
    # what the answer model reads (LlamaIndex's LLM metadata mode) is the excerpt, not the article
    assert "Filler paragraph." not in node.get_content(metadata_mode=MetadataMode.LLM)
    # an article without an excerpt keeps its whole text
    assert result.nodes[1].node.get_content() == "Article 2 explains topic 2.\n\nIt has a second paragraph."
    assert "flash_excerpt_of_chars" not in result.nodes[1].node.metadata


def test_an_excerpt_that_saves_nothing_leaves_the_text_whole() -> None:
    small = "Set max_batch=8 to fix it.\n\nRestart after."  # over the threshold below, shorter than the note
    llm = ScriptedLLM([answer({"id": 1, "reason": "r", "excerpt": "Set max_batch=8 to fix it."})])
    result = make_reranker(llm, excerpt_threshold_chars=10).rerank_detailed("q", [article_node(1, text=small)])
    assert result.nodes[0].node.get_content() == small
    assert result.nodes[0].node.metadata["flash_excerpt"] == "Set max_batch=8 to fix it."
    assert "flash_excerpt_of_chars" not in result.nodes[0].node.metadata


def test_with_excerpt_replaces_text_off_the_full_text_stays() -> None:
    result, big_text = _excerpt_run(excerpt_replaces_text=False)
    assert result.nodes[0].node.get_content() == big_text
    assert result.nodes[0].node.metadata["flash_excerpt"] == "The fix is to set max_batch=8. Restart after."
    assert "flash_excerpt_of_chars" not in result.nodes[0].node.metadata


def test_tokens_shown_count_the_turn1_prompt_and_tool_results() -> None:
    long_nodes = [article_node(i, text=f"word{i} " * 2000) for i in range(1, 4)]
    without_tool = make_reranker(ScriptedLLM([answer(1)])).rerank_detailed("query", long_nodes)
    with_tool = make_reranker(ScriptedLLM([tool_call(1, 2), answer(1)])).rerank_detailed("query", long_nodes)

    assert 0 < without_tool.prompt_tokens_shown < 1000
    assert with_tool.prompt_tokens_shown > without_tool.prompt_tokens_shown + 4000


def test_usage_from_the_endpoint_sets_tokens_and_cost() -> None:
    llm = UsageScriptedLLM([tool_call(1), answer(1)], usage={"prompt_tokens": 1000, "completion_tokens": 100})
    flash = make_reranker(llm, input_price_per_million=0.5, output_price_per_million=3.0)

    result = flash.rerank_detailed("query", article_nodes(3))

    assert (result.input_tokens, result.output_tokens) == (2000, 200)
    assert result.cost_usd == pytest.approx((2000 * 0.5 + 200 * 3.0) / 1e6)


def test_without_usage_tokens_are_counted_locally() -> None:
    result = make_reranker(ScriptedLLM([answer(1)]), input_price_per_million=1.0).rerank_detailed(
        "query", article_nodes(3)
    )
    assert result.input_tokens == result.prompt_tokens_shown
    assert result.output_tokens > 0
    assert result.cost_usd == pytest.approx(result.input_tokens / 1e6)


def test_no_candidates_returns_empty_without_calling_the_llm() -> None:
    llm = ScriptedLLM([])
    result = make_reranker(llm).rerank_detailed("query", [])
    assert (result.decision, result.nodes, llm.calls) == (D.NO_CANDIDATES, [], [])


# --- what the model is sent --------------------------------------------------------------------------


def test_turn1_shows_date_query_conversation_facts_and_offers_the_tool_without_forcing_it() -> None:
    llm = ScriptedLLM([answer(1)])
    make_reranker(llm).rerank_detailed(
        "how to rotate keys",
        article_nodes(3),
        conversation=[ChatMessage(role="user", content="we use KMS"), "assistant: noted"],
        user_facts=["admin of the prod cluster"],
    )
    call = llm.calls[0]
    text = sent_text(llm, 0)

    assert [t.metadata.name for t in call.tools] == ["get_topics_content"]
    assert call.kwargs["tool_required"] is False
    assert "Current date: 2026-01-04" in text
    assert "Query: how to rotate keys" in text
    assert "user: we use KMS\nassistant: noted" in text
    assert "- admin of the prod cluster" in text
    assert "[ID:2] 2025-03-12 | ~55 chars | Topic 2" in text


def test_response_format_is_sent_only_after_a_tool_call_and_only_when_enabled() -> None:
    enabled = ScriptedLLM([tool_call(1), answer(1)])
    make_reranker(enabled, response_format="json_schema").rerank_detailed("q", article_nodes(3))
    disabled = ScriptedLLM([tool_call(1), answer(1)])
    make_reranker(disabled).rerank_detailed("q", article_nodes(3))

    assert "response_format" not in enabled.calls[0].kwargs
    schema = enabled.calls[1].kwargs["response_format"]
    assert schema["type"] == "json_schema"
    assert schema["json_schema"]["schema"]["properties"]["topics"]["maxItems"] == 5
    assert all("response_format" not in c.kwargs for c in disabled.calls)


def test_json_object_response_format_is_the_llama_cpp_server_form() -> None:
    llm = ScriptedLLM([tool_call(1), answer(1)])
    make_reranker(llm, response_format="json_object", top_n=3).rerank_detailed("q", article_nodes(3))

    sent = llm.calls[1].kwargs["response_format"]
    assert set(sent) == {"type", "schema"}
    assert sent["type"] == "json_object"
    assert sent["schema"]["properties"]["topics"]["maxItems"] == 3
    assert sent["schema"]["required"] == ["topics"]


def test_forced_mode_forces_the_named_tool_once_then_asks_for_the_answer_without_tools() -> None:
    llm = ScriptedLLM([tool_call(3, 1), answer(3)])
    flash = make_reranker(llm, tool_mode="forced", response_format="json_object")

    result = flash.rerank_detailed("q", article_nodes(5))

    assert (result.decision, result.selected_kb_ids) == (D.ACCEPTED, kb(3))
    first, second = llm.calls
    assert first.kwargs["tool_choice"] == {"type": "function", "function": {"name": "get_topics_content"}}
    assert "response_format" not in first.kwargs
    assert [t.metadata.name for t in first.tools] == ["get_topics_content"]
    assert second.tools == []
    assert "tool_choice" not in second.kwargs
    assert second.kwargs["response_format"]["type"] == "json_object"
    assert "<<<CONTENT id=3>>>" in sent_text(llm, 1)


def test_forced_mode_falls_back_to_the_requested_ids_when_the_answer_is_unusable() -> None:
    llm = ScriptedLLM([tool_call(4, 2), "I would pick the fourth one"])
    result = make_reranker(llm, tool_mode="forced").rerank_detailed("q", article_nodes(5))
    assert (result.decision, result.source, result.selected_kb_ids) == (D.INVALID_JSON, S.TOOL_REQUESTS, kb(4, 2))


def test_forced_mode_reply_without_the_tool_call_is_a_protocol_violation_in_upstream_order() -> None:
    # A valid-looking answer that skipped the required call was given without reading any article.
    llm = ScriptedLLM([answer(4, 2)])
    result = make_reranker(llm, tool_mode="forced", top_n=3).rerank_detailed("q", article_nodes(5))

    assert (result.decision, result.source, result.selected_kb_ids) == (D.PROTOCOL_VIOLATION, S.UPSTREAM, kb(1, 2, 3))
    assert result.is_fallback
    assert "required" in (result.error or "")
    assert len(llm.calls) == 1
    assert result.trace is not None and result.trace.decision is D.PROTOCOL_VIOLATION


def test_auto_mode_still_accepts_an_answer_without_a_tool_call() -> None:
    result = make_reranker(ScriptedLLM([answer(4, 2)]), tool_mode="auto").rerank_detailed("q", article_nodes(5))
    assert (result.decision, result.selected_kb_ids) == (D.ACCEPTED, kb(4, 2))


def test_inline_tool_results_send_no_tool_messages() -> None:
    llm = ScriptedLLM([tool_call(2), answer(2)])
    result = make_reranker(llm, inline_tool_results=True).rerank_detailed("q", article_nodes(3))

    assert result.decision is D.ACCEPTED
    second = llm.calls[1].messages
    assert [m.role for m in second] == [MessageRole.SYSTEM, MessageRole.USER, MessageRole.ASSISTANT, MessageRole.USER]
    assert second[2].content == 'Calling get_topics_content({"ids": [2]})'
    assert (second[3].content or "").startswith("Result of get_topics_content:\n<<<CONTENT id=2>>>")
    # the trace keeps the canonical messages, so replays and reviews see the real protocol
    assert result.trace is not None
    assert [m.role for m in result.trace.turns[1].new_messages] == ["assistant", "tool"]


def test_without_tool_calls_allowed_no_tool_is_offered_and_the_format_applies_at_once() -> None:
    llm = ScriptedLLM([answer(2)])
    result = make_reranker(llm, max_tool_calls=0, response_format="json_schema").rerank_detailed("q", article_nodes(3))

    assert result.decision is D.ACCEPTED
    assert llm.calls[0].tools == []
    assert "tool_required" not in llm.calls[0].kwargs
    assert llm.calls[0].kwargs["response_format"]["type"] == "json_schema"


BAD_ARGS = ToolCall("get_topics_content", {"bad": True})


class _BadToolArgsLLM(ScriptedLLM):
    """An integration whose tool-call parsing raises (as OpenAI's does on arguments that are a list)."""

    def get_tool_calls_from_response(self, response: Any, error_on_no_tool_call: bool = True, **kwargs: Any) -> Any:
        calls = super().get_tool_calls_from_response(response, error_on_no_tool_call, **kwargs)
        if any(c.tool_kwargs == {"bad": True} for c in calls):
            raise ValueError("tool_kwargs: Input should be a valid dictionary")
        return calls


@pytest.mark.parametrize(
    ("script", "source", "kb_ids"),
    [
        pytest.param([BAD_ARGS], S.UPSTREAM, kb(1, 2, 3, 4, 5), id="first_reply"),
        pytest.param([tool_call(6, 2), BAD_ARGS], S.TOOL_REQUESTS, kb(6, 2), id="after_a_tool_call"),
    ],
)
def test_an_unreadable_tool_call_is_a_named_fallback_not_an_exception(
    script: list[Any], source: SelectionSource, kb_ids: list[str]
) -> None:
    result = make_reranker(_BadToolArgsLLM(script)).rerank_detailed("q", article_nodes(8))

    assert (result.decision, result.source, result.selected_kb_ids) == (D.INVALID_JSON, source, kb_ids)
    assert "unreadable tool call" in (result.error or "")


def test_tool_result_follows_the_assistant_tool_call_with_its_id() -> None:
    llm = ScriptedLLM([ToolCall("get_topics_content", {"ids": [2]}, call_id="abc"), answer(2)])
    make_reranker(llm).rerank_detailed("q", article_nodes(3))
    messages = llm.calls[1].messages

    assert messages[-2].role is MessageRole.ASSISTANT
    assert messages[-1].role is MessageRole.TOOL
    assert messages[-1].additional_kwargs["tool_call_id"] == "abc"


# --- LlamaIndex contract -----------------------------------------------------------------------------


def test_works_as_a_node_postprocessor_sync_and_async() -> None:
    flash = make_reranker(ScriptedLLM([answer(2), answer(3)]))

    sync_nodes = flash.postprocess_nodes(article_nodes(4), query_str="q")
    assert [n.node.metadata["kb_id"] for n in sync_nodes] == kb(2)
    assert flash.last_result is not None and flash.last_result.selected_kb_ids == kb(2)

    async_nodes = asyncio.run(flash.apostprocess_nodes(article_nodes(4), query_str="q"))
    assert [n.node.metadata["kb_id"] for n in async_nodes] == kb(3)


def test_postprocessor_without_a_query_says_how_to_pass_it() -> None:
    flash = make_reranker(ScriptedLLM([]))
    with pytest.raises(ValueError, match="postprocess_nodes\\(nodes, query_str=...\\)"):
        flash.postprocess_nodes(article_nodes(2))


def test_a_plain_llm_is_rejected_with_advice() -> None:
    with pytest.raises(TypeError, match="needs a FunctionCallingLLM"):
        FlashReranker(MockLLM())  # type: ignore[arg-type]


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="top_n"):
        FlashReranker(ScriptedLLM([]), top_n=0)
    with pytest.raises(ValueError, match="tool_mode"):
        FlashReranker(ScriptedLLM([]), tool_mode="required")


def test_a_misspelt_setting_is_refused_with_the_valid_names() -> None:
    with pytest.raises(TypeError, match=r"unknown FlashReranker setting\(s\) top_m; the settings are: .*top_n"):
        FlashReranker(ScriptedLLM([]), top_m=3)


class _Collector(BaseEventHandler):
    events: list[BaseEvent] = []

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        self.events.append(event)


def test_rerank_emits_llamaindex_rerank_events() -> None:
    collector = _Collector(events=[])
    root = get_dispatcher()
    root.add_event_handler(collector)
    try:
        make_reranker(ScriptedLLM([answer(2)])).postprocess_nodes(article_nodes(3), query_str="q")
    finally:
        root.event_handlers.remove(collector)

    starts = [e for e in collector.events if isinstance(e, ReRankStartEvent)]
    ends = [e for e in collector.events if isinstance(e, ReRankEndEvent)]
    assert len(starts) == len(ends) == 1
    assert (starts[0].top_n, starts[0].model_name, len(starts[0].nodes)) == (5, "scripted", 3)
    assert [n.node.metadata["kb_id"] for n in ends[0].nodes] == kb(2)


# --- the conversation and the follow-up rewrite ------------------------------------------------------
def _rewriter(reply: str | Exception) -> tuple[QueryContextualizer, ScriptedLLM]:
    llm = ScriptedLLM([reply])
    return QueryContextualizer(llm), llm


HISTORY = [
    ChatMessage(role=MessageRole.USER, content="How do I insert a table of contents?"),
    ChatMessage(role=MessageRole.ASSISTANT, content="Choose Insert > Table of Contents."),
]


def test_a_follow_up_is_rewritten_from_the_conversation_and_the_model_sees_the_standalone_query() -> None:
    ctx, ctx_llm = _rewriter("How do I update a table of contents?")
    llm = ScriptedLLM([answer(2)])
    flash = make_reranker(llm, contextualizer=ctx)

    result = flash.rerank_detailed("And how do I update it?", article_nodes(4), conversation=HISTORY)

    assert (result.query, result.original_query) == ("How do I update a table of contents?", "And how do I update it?")
    assert "Query: How do I update a table of contents?" in sent_text(llm, 0)
    assert "Latest message, as the user wrote it (data): And how do I update it?" in sent_text(llm, 0)
    assert "Choose Insert > Table of Contents." in sent_text(llm, 0)  # the conversation is shown too
    assert "How do I insert a table of contents?" in "\n".join(m.content or "" for m in ctx_llm.calls[0].messages)
    assert result.trace is not None and result.trace.original_query == "And how do I update it?"
    assert result.trace.query == "How do I update a table of contents?"  # a replay shows the model the same
    assert result.input_tokens > 0  # the rewrite is billed too (no usage from the fake: counted)


def test_without_a_conversation_the_query_is_not_rewritten_and_no_call_is_made() -> None:
    ctx, ctx_llm = _rewriter("never used")
    llm = ScriptedLLM([answer(1)])
    result = make_reranker(llm, contextualizer=ctx).rerank_detailed("q", article_nodes(3))
    assert (result.query, result.original_query) == ("q", None)
    assert ctx_llm.calls == [] and "Latest message" not in sent_text(llm, 0)


def test_a_failed_rewrite_keeps_the_query() -> None:
    ctx, _ = _rewriter(RuntimeError("502"))
    llm = ScriptedLLM([answer(1)])
    result = make_reranker(llm, contextualizer=ctx).rerank_detailed("and it?", article_nodes(3), conversation=HISTORY)
    assert (result.decision, result.query, result.original_query) == (D.ACCEPTED, "and it?", None)


def test_as_a_postprocessor_it_reads_the_conversation_set_around_the_search() -> None:
    ctx, _ = _rewriter("How do I update a table of contents?")
    llm = ScriptedLLM([answer(2), answer(1)])
    flash = make_reranker(llm, contextualizer=ctx)

    with flash_conversation(HISTORY):
        flash.postprocess_nodes(article_nodes(3), query_str="And how do I update it?")
    assert flash.last_result is not None and flash.last_result.query == "How do I update a table of contents?"
    assert "Choose Insert > Table of Contents." in sent_text(llm, 0)

    flash.postprocess_nodes(article_nodes(3), query_str="And how do I update it?")  # outside: no conversation
    assert flash.last_result.query == "And how do I update it?"
    assert "Choose Insert > Table of Contents." not in sent_text(llm, 1)
