"""ContextBudget: the invariants of the hook, on the scenarios of seed 004 and edge cases."""

from __future__ import annotations

import asyncio
import copy
import json
import re
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events.base import BaseEvent

from ragidx.article import SEE_ABOVE, Article
from ragidx.budget import (
    ContextBudget,
    ContextBudgetEvent,
    ContextWindowTooSmallError,
    Fit,
    PromptAccountant,
    RetrievalCap,
    TruncateCompressor,
)
from ragidx.budget.messages import tool_results, with_results
from tests.budget.helpers import (
    article,
    assistant,
    fit,
    payload_of,
    retrieve_tool_spec,
    system_message,
    text_of_tokens,
    tool_call,
    tool_result,
    user,
)

ACC = PromptAccountant()
TOOLS = [retrieve_tool_spec()]


def prompt_tokens(messages: list[ChatMessage]) -> int:
    return ACC.count_prompt(messages, tools=TOOLS)


def snapshot(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    return [m.model_dump() for m in messages]


def five_articles(tokens: int = 1000) -> list[dict[str, Any]]:
    return [article(f"kb{i}", 1.0 - i * 0.1, text_of_tokens(tokens, 10 + i)) for i in range(5)]


def scenario_8k() -> tuple[str, list[ChatMessage]]:
    """Seed 004: 8K window, ~2K system prompt, ~1.5K conversation, 5 articles x 1K."""
    system = text_of_tokens(2000, 1)
    messages = [
        user(text_of_tokens(700, 2)),
        assistant(text_of_tokens(700, 3)),
        user("How do I install the printer driver update?"),
        tool_call("c1"),
        tool_result("c1", five_articles()),
    ]
    return system, messages


def fit_8k(budget: ContextBudget) -> Fit:
    system, messages = scenario_8k()
    return fit(budget, messages, system_prompt=system, tools=TOOLS, context_window=8192, max_output_tokens=512)


def test_under_trigger_returns_none_and_reports() -> None:
    budget = ContextBudget()
    messages = [user("hi"), tool_call("c1"), tool_result("c1", [article("a", 0.9, "short text")])]
    result = fit(budget, messages, system_prompt="Be brief.", tools=TOOLS, context_window=8192, max_output_tokens=512)
    assert not result.changed
    assert result.report.path == ["under_trigger"]
    assert (
        result.report.tokens_after
        == result.report.tokens_before
        == prompt_tokens([system_message("Be brief."), *messages])
    )


def test_8k_scenario_fits_and_best_article_keeps_most() -> None:
    system, messages = scenario_8k()
    before = snapshot(messages)
    result = fit(
        ContextBudget(), messages, system_prompt=system, tools=TOOLS, context_window=8192, max_output_tokens=512
    )
    assert snapshot(messages) == before  # input untouched
    assert result.changed
    r = result.report
    assert (r.trigger_pct, r.target_pct) == (0.75, 0.70)  # small window: act earlier
    assert prompt_tokens(result.messages) + r.safety_margin_tokens + 512 <= 8192
    assert prompt_tokens(result.messages) <= r.target_tokens
    arts = payload_of(result.messages[-1])["articles"]
    assert [a["kb_id"] for a in arts] == [f"kb{i}" for i in range(5)]  # order kept
    kept = [a["metadata"]["tokens"] for a in arts]
    assert kept == sorted(kept, reverse=True) and kept[0] > kept[-1]
    shown = {a.kb_id: a for a in result.articles}
    for a in arts:
        assert a["metadata"]["compressed"] is True
        assert "compressed_verbatim" not in a["metadata"]  # for citations, not the model: no tokens in the prompt
        assert shown[a["kb_id"]].metadata["compressed_verbatim"] is True  # extracted sentences: the article's words
        assert a["metadata"]["original_tokens"] == 1000  # the content's own tokens (the prompt is counted whole)
        assert ACC.tokens.count(a["content"]) == a["metadata"]["tokens"]
    meta = payload_of(result.messages[-1])["metadata"]
    assert meta["tokens_saved"] == 5 * 1000 - sum(kept)
    assert meta["compressed_articles_count"] == 5
    assert meta["query"] == "q"  # retrieval metadata kept
    assert "compressed" in r.path


def test_4k_scenario_fits_or_recommends_fallback() -> None:
    """Seed 004: 4K window, ~1K conversation, ~2.5K overhead, 3 articles x 500."""
    system = text_of_tokens(1900, 4)
    messages = [
        user(text_of_tokens(500, 5)),
        assistant(text_of_tokens(450, 6)),
        user("Where is the backup restore option?"),
        tool_call("c1"),
        tool_result("c1", [article(f"kb{i}", 0.9 - i * 0.2, text_of_tokens(500, 20 + i)) for i in range(3)]),
    ]
    budget = ContextBudget(fallback_context_window=32768)
    result = fit(budget, messages, system_prompt=system, tools=TOOLS, context_window=4096, max_output_tokens=256)
    assert result.changed
    r = result.report
    assert prompt_tokens(result.messages) + r.safety_margin_tokens + 256 <= 4096
    assert r.fallback_recommended
    assert r.fallback_reason is not None and "32768" in r.fallback_reason
    best = next(a for a in r.articles if a.article_rank == 0)
    assert best.status != "dropped"  # the worst go first


def test_multiple_tool_calls_deduplicate_and_keep_pairs() -> None:
    shared = text_of_tokens(1500, 30)
    call1 = [article("a", 0.2, shared), article("b", 0.5, text_of_tokens(1500, 31))]
    call2 = [article("c", 0.4, text_of_tokens(1500, 32)), article("a", 0.9, shared)]
    call3 = [article("d", 0.1, text_of_tokens(1500, 33))]
    messages = [
        user("How do I export the index?"),
        tool_call("c1", "c2"),
        tool_result("c1", call1),
        tool_result("c2", call2),
        tool_call("c3"),
        tool_result("c3", call3),
    ]
    result = fit(
        ContextBudget(), messages, system_prompt="sys", tools=TOOLS, context_window=8192, max_output_tokens=512
    )
    out = result.messages[1:]  # after the system prompt
    assert [m.role for m in out] == [m.role for m in messages]
    calls = [b.tool_call_id for m in out for b in m.blocks if isinstance(b, ToolCallBlock)]
    results = [m.additional_kwargs["tool_call_id"] for m in out if m.role == MessageRole.TOOL]
    assert calls == results == ["c1", "c2", "c3"]
    first, second = payload_of(out[2])["articles"], payload_of(out[3])["articles"]
    assert [a["kb_id"] for a in first] == ["a", "b"]
    # "a" scored 0.9 in the second call: it stays the best article, shown at its first place ...
    assert first[0]["metadata"]["rerank_score"] == 0.9
    assert first[0]["metadata"]["normalized_rank"] == 0.0
    # ... and its repeat is a short reference.
    assert second[1] == {
        "kb_id": "a",
        "title": "Article a",
        "url": "https://kb.example/a",
        SEE_ABOVE: True,
    }
    ranks = {
        a["kb_id"]: a["metadata"]["normalized_rank"]
        for m in out[2:]
        if m.role == MessageRole.TOOL
        for a in payload_of(m)["articles"]
        if "metadata" in a
    }
    assert ranks == {"a": 0.0, "b": pytest.approx(1 / 3), "c": pytest.approx(2 / 3), "d": 1.0}
    assert "deduplicated" in result.report.path
    assert [o.status for o in result.report.articles].count("reference") == 1


def test_error_and_plain_tool_messages_pass_through() -> None:
    error = ChatMessage(
        role=MessageRole.TOOL,
        content=json.dumps({"error": "store offline", "metadata": {"query": "q", "has_results": False}}),
        additional_kwargs={"tool_call_id": "c2", "name": "retrieve_context"},
    )
    plain = ChatMessage(
        role=MessageRole.TOOL,
        content="not json " * 50,
        additional_kwargs={"tool_call_id": "c3", "name": "calc"},
    )
    messages = [
        user("question"),
        tool_call("c1", "c2", "c3"),
        tool_result("c1", five_articles(1500)),
        error,
        plain,
    ]
    result = fit(ContextBudget(), messages, context_window=8192, max_output_tokens=512)
    assert result.changed
    assert result.messages[3].content == error.content
    assert result.messages[4].content == plain.content
    assert "compressed" in result.report.path


def test_zero_articles_and_no_tool_messages() -> None:
    empty = [user("q"), tool_call("c1"), tool_result("c1", [])]
    result = fit(ContextBudget(), empty, context_window=4096, max_output_tokens=256)
    assert not result.changed and result.report.path == ["under_trigger"]
    talk = [user(text_of_tokens(400, 7)), assistant(text_of_tokens(400, 8)), user("and now?")]
    result = fit(
        ContextBudget(), talk, system_prompt=text_of_tokens(1000, 9), context_window=2048, max_output_tokens=128
    )
    assert result.changed  # history had to go
    assert ACC.count_prompt(result.messages) <= result.report.hard_limit_tokens
    assert result.messages[-1].content == "and now?"


def test_tool_results_without_articles_are_sent_and_counted_as_they_came() -> None:
    # Over the trigger with an empty result: the message is not rewritten, so the report counts the original
    # (it used to count a compact re-rendering that was never sent).
    messages = [user("q"), tool_call("c1"), tool_result("c1", [])]
    system = text_of_tokens(1700, 3)
    result = fit(
        ContextBudget(), messages, system_prompt=system, tools=TOOLS, context_window=2321, max_output_tokens=16
    )
    assert not result.changed and result.report.path == ["nothing_to_compress"]
    assert result.report.tokens_after == prompt_tokens([system_message(system), *messages])


def test_single_article_gets_whole_budget() -> None:
    messages = [
        user("q"),
        tool_call("c1"),
        tool_result("c1", [article("only", 0.3, text_of_tokens(6000, 40))]),
    ]
    result = fit(ContextBudget(), messages, context_window=4096, max_output_tokens=256)
    assert result.changed
    (outcome,) = result.report.articles
    assert outcome.normalized_rank == 0.0
    assert outcome.status == "compressed"
    assert result.report.target_tokens - 150 <= result.report.tokens_after <= result.report.target_tokens


def test_window_too_small_raises_with_numbers() -> None:
    system = text_of_tokens(3000, 11)
    with pytest.raises(ContextWindowTooSmallError) as info:
        fit(ContextBudget(), [user("q")], system_prompt=system, tools=TOOLS, context_window=2048, max_output_tokens=256)
    err = info.value
    assert err.required_tokens > 2048
    assert re.escape("Use a model with a larger context window, shorten the system prompt") in re.escape(str(err))
    with pytest.raises(
        ContextWindowTooSmallError,
        match=re.escape(
            f"context window of 2048 tokens cannot hold the fixed prompt: system prompt {err.system_tokens}"
        ),
    ):
        fit(ContextBudget(), [user("q")], system_prompt=system, tools=TOOLS, context_window=2048, max_output_tokens=256)


@pytest.mark.parametrize(
    "behaviour",
    ["whole", "longer", "empty", "raise"],
)
def test_misbehaving_compressor_never_breaks_the_window(behaviour: str) -> None:
    class Bad:
        name = "bad"

        def compress(self, art: Article, target_tokens: int, question: str) -> str:
            if behaviour == "raise":
                raise RuntimeError("boom")
            return {"whole": art.content, "longer": art.content * 2, "empty": ""}[behaviour]

        async def acompress(self, art: Article, target_tokens: int, question: str) -> str:
            return self.compress(art, target_tokens, question)

    result = fit_8k(ContextBudget(compressor=Bad()))
    assert result.changed
    assert prompt_tokens(result.messages) <= result.report.hard_limit_tokens
    reasons = {a.fallback_reason for a in result.report.articles}
    expected = {"whole": "overshoot", "longer": "overshoot", "empty": "empty", "raise": "error: RuntimeError"}
    assert reasons == {expected[behaviour]}
    assert all(a.status == "truncated" for a in result.report.articles)


def test_memory_summarizes_long_history_keeping_pairs() -> None:
    history: list[ChatMessage] = []
    for i in range(6):
        history += [
            user(f"old question {i} " + text_of_tokens(300, 50 + i)),
            tool_call(f"h{i}"),
            tool_result(f"h{i}", [article(f"old{i}", 0.5, text_of_tokens(300, 60 + i))]),
            assistant(text_of_tokens(300, 70 + i)),
        ]
    messages = [*history, user("current question?")]
    result = fit(ContextBudget(), messages, context_window=8192, max_output_tokens=512)
    out = result.messages
    assert out is not None
    assert "memory_summarized" in result.report.path
    assert out[0].content is not None and out[0].content.startswith("Summary of the earlier conversation")
    assert out[-1].content == "current question?"
    for i, m in enumerate(out):  # every tool result follows its call
        if m.role == MessageRole.TOOL:
            assert out[i - 1].role in (MessageRole.ASSISTANT, MessageRole.TOOL)
    assert ACC.count_prompt(out) <= result.report.trigger_tokens


def test_cap_is_set_for_the_retrieve_tool() -> None:
    cap = RetrievalCap()
    budget = ContextBudget(cap=cap, max_articles_per_call=5)
    fit(budget, [user("q")], context_window=200_000, max_output_tokens=1024)
    assert cap.limit(5) == 5
    result = fit_8k(budget)
    assert result.report.article_cap == cap.get()
    assert cap.limit(5) < 5  # the prompt is full: fewer articles next time


def test_event_carries_the_report() -> None:
    seen: list[BaseEvent] = []

    class Collector(BaseEventHandler):
        def handle(self, event: BaseEvent, **kwargs: Any) -> None:
            seen.append(event)

    root = get_dispatcher()
    handler = Collector()
    root.add_event_handler(handler)
    try:
        result = fit_8k(ContextBudget())
    finally:
        root.event_handlers.remove(handler)
    events = [e for e in seen if isinstance(e, ContextBudgetEvent)]
    assert len(events) == 1 and events[0].report == result.report
    assert json.loads(events[0].report.model_dump_json())["path"] == result.report.path


def test_afit_matches_fit() -> None:
    _, messages = scenario_8k()
    budget = ContextBudget(compressor=TruncateCompressor())
    sync = fit(budget, messages, tools=TOOLS, context_window=4096, max_output_tokens=512)
    results = tool_results(messages)
    asyn = asyncio.run(
        budget.afit(
            messages,
            results,
            lambda conversation, sent, _: with_results(conversation, sent, results),
            tools=TOOLS,
            context_window=4096,
            max_output_tokens=512,
        )
    )
    assert sync.changed and asyn.changed
    assert [m.content for m in sync.messages] == [m.content for m in asyn.messages]


def test_input_messages_are_never_mutated_even_when_dropping() -> None:
    messages = [user("q"), tool_call("c1"), tool_result("c1", five_articles(3000))]
    frozen = copy.deepcopy(snapshot(messages))
    result = fit(
        ContextBudget(), messages, system_prompt=text_of_tokens(1200, 3), context_window=2048, max_output_tokens=128
    )
    assert snapshot(messages) == frozen
    assert result.changed
    assert all(a is not b for a, b in zip(result.messages[3:], messages[2:], strict=True))
    assert "dropped" in result.report.path


def test_llm_summaries_keep_title_and_url_for_citations() -> None:
    from ragidx.budget import LLMSummaryCompressor
    from tests.fakes.scripted_llm import ScriptedLLM

    llm = ScriptedLLM(["Install the driver from the vendor page, then restart."], cycle=True)
    result = fit_8k(ContextBudget(compressor=LLMSummaryCompressor(llm)))
    assert result.changed
    arts = payload_of(result.messages[-1])["articles"]
    assert [(a["title"], a["url"]) for a in arts] == [(f"Article kb{i}", f"https://kb.example/kb{i}") for i in range(5)]
    assert arts[0]["content"] == "Install the driver from the vendor page, then restart."
    assert result.report.compressor == "llm_summary"


def test_relevance_floor_leaves_out_weak_articles_even_when_all_fit() -> None:
    # Scores as the offline reranker gives them: one clear match, then articles under half its score.
    found = [article("best", 1.5, "The default is 1930 to 2029."), article("close", 0.9, "Years are four digits.")]
    weak = [article("weak1", 0.6, text_of_tokens(200, 50)), article("weak2", 0.3, text_of_tokens(200, 51))]
    messages = [user("Which century range?"), tool_call("c1"), tool_result("c1", [*found, *weak])]
    before = snapshot(messages)
    plain = fit(ContextBudget(), messages, tools=TOOLS, context_window=8192, max_output_tokens=512)
    floored = fit(ContextBudget(relevance_floor=0.5), messages, tools=TOOLS, context_window=8192, max_output_tokens=512)
    assert plain.report.path == ["under_trigger"] and not plain.changed
    assert [a.kb_id for a in floored.articles] == ["best", "close"]
    assert [a["kb_id"] for a in payload_of(floored.messages[-1])["articles"]] == ["best", "close"]
    assert floored.report.path == ["below_floor", "under_trigger"]
    left_out = [o for o in floored.report.articles if o.status == "dropped"]
    assert {o.kb_id for o in left_out} == {"weak1", "weak2"}
    assert {o.fallback_reason for o in left_out} == {"below_relevance_floor"}
    assert floored.report.tokens_after < plain.report.tokens_after == floored.report.tokens_before
    assert not floored.report.fallback_recommended
    assert snapshot(messages) == before


def test_relevance_floor_is_relative_to_the_best_of_every_search_and_off_for_signed_scores() -> None:
    # Two searches: the floor is a share of the best score over both, whichever search found it.
    messages = [
        user("q"),
        tool_call("c1", "c2"),
        tool_result("c1", [article("a", 0.4, "one"), article("b", 0.1, "two")]),
        tool_result("c2", [article("c", 0.8, "three"), article("d", 0.3, "four")]),
    ]
    result = fit(ContextBudget(relevance_floor=0.45), messages, context_window=8192, max_output_tokens=512)
    assert [a.kb_id for a in result.articles] == ["c", "a"]
    # A cross-encoder's logits can be negative: a share of the best means nothing there, all are kept.
    signed = [user("q"), tool_call("c1"), tool_result("c1", [article("a", 2.0, "x"), article("b", -3.0, "y")])]
    result = fit(ContextBudget(relevance_floor=0.5), signed, context_window=8192, max_output_tokens=512)
    assert [a.kb_id for a in result.articles] == ["a", "b"] and not result.changed


def test_relevance_floor_keeps_what_an_llm_reranker_chose() -> None:
    # flash scores its selection by position (1.0, 0.5, ...): every article it chose stays
    chosen = [article("a", 1.0, "one"), article("b", 0.5, "two"), article("c", 0.25, "three")]
    for a in chosen:
        a["metadata"]["flash_rank"] = 1
    messages = [user("q"), tool_call("c1"), tool_result("c1", chosen)]
    result = fit(ContextBudget(relevance_floor=0.4), messages, context_window=8192, max_output_tokens=512)
    assert [a.kb_id for a in result.articles] == ["a", "b", "c"]


def test_relevance_floor_must_be_a_share() -> None:
    with pytest.raises(ValueError, match=r"relevance_floor must be in \[0, 1\)"):
        ContextBudget(relevance_floor=1.0)
