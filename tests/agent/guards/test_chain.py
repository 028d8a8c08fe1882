"""Guard profiles end to end: the agent asks the chain, the chain's profile decides what a reply becomes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from llama_index.core.tools import FunctionTool

from ragidx.agent.answer import NOT_FOUND_TEXT, Answer
from ragidx.agent.guards import GUARD_NAMES, PROFILES, GuardChain, profile_names
from ragidx.agent.rendering import prompt_title
from ragidx.config import LLMEndpoint
from tests.agent.helpers import make_agent

KB = {
    row["id"]: row for row in map(json.loads, (Path(__file__).parents[2] / "benchmarks/fixtures/guard_kb.jsonl").open())
}
RESOURCE = "postgresql-15:runtime-config-resource.html"
CONFIG_PAGES = [
    RESOURCE,
    "postgresql-15:runtime-config-connection.html",
    "postgresql-15:runtime-config-wal.html",
    "postgresql-15:runtime-config-query.html",
]


def pages_tool(kb_ids: list[str]) -> FunctionTool:
    """A retrieve_context tool that finds ``kb_ids``, in that order, for any query."""

    def retrieve_context(query: str, top_k: int | None = None) -> str:
        """Search the knowledge base; returns articles as JSON."""
        n = len(kb_ids)
        articles = [
            {"kb_id": k, "title": KB[k]["title"], "url": KB[k]["url"], "content": KB[k]["text"],
             "metadata": {"rerank_score": 1.0 - i / 10, "normalized_rank": i / max(1, n - 1), "article_rank": i}}
            for i, k in enumerate(kb_ids)
        ]  # fmt: skip
        return json.dumps({"articles": articles, "metadata": {"query": query, "articles_count": n}})

    return FunctionTool.from_defaults(retrieve_context)


def ask(reply: str, kb_ids: list[str], question: str, profile: str) -> Answer:
    chain = GuardChain.from_profile(profile, title=prompt_title)
    agent, _ = make_agent([reply], tool=pages_tool(kb_ids), tool_mode="forced", plan="never", guards=chain)

    async def run() -> Answer:
        result: Answer = await agent.run(question=question)
        return result

    return asyncio.run(run())


MYSQL = (
    "shared_buffers defaults to 128MB [1]. Unlike MySQL's innodb_buffer_pool_size or Oracle's SGA, PostgreSQL "
    "also relies on the OS page cache."
)
SHMMAX = (
    "The default is 128MB [1], though it may be lower if your kernel settings don't support it. On Linux, Windows "
    "and macOS you may need to raise SHMMAX."
)


@pytest.mark.parametrize(
    ("reply", "kb_ids", "question", "stated"),
    [
        (MYSQL, CONFIG_PAGES, "How much memory does shared_buffers use by default?", "MySQL, Oracle, SGA"),
        (SHMMAX, [RESOURCE], "What is the default value of shared_buffers?", "Linux, Windows, SHMMAX"),
    ],
)
def test_a_strong_models_right_answer_with_context_is_kept_by_the_endpoint_profile(
    reply: str, kb_ids: list[str], question: str, stated: str
) -> None:
    kept = ask(reply, kb_ids, question, "endpoint")
    assert not kept.not_found and kept.text == reply and kept.not_found_reason is None
    assert [c.kb_id for c in kept.citations] == [RESOURCE]
    assert kept.guards == [] and kept.guard_profile["profile"] == "endpoint"
    # the small-model profile still declines it: it states names no article shown writes
    declined = ask(reply, kb_ids, question, "small-model")
    assert declined.not_found and declined.text == NOT_FOUND_TEXT and declined.citations == []
    reason = f"the model's reply states {stated}, which no article shown writes"
    assert declined.not_found_reason == reason
    assert declined.guards == [{"name": "ungrounded_names", "reason": reason}]
    assert declined.model_text == reply


def test_a_gate_that_fires_is_recorded_on_the_answer() -> None:
    answer = ask("It is 3 [1].", [RESOURCE], "What is the default of io_method?", "small-model")
    assert answer.not_found and answer.guards == [
        {"name": "missing_identifiers", "reason": "no article found mentions io_method"}
    ]
    # the endpoint profile has no such gate: the model is asked (and here says what it says)
    assert not ask("It is 3 [1].", [RESOURCE], "What is the default of io_method?", "endpoint").not_found


def test_the_off_profile_validates_markers_only() -> None:
    answer = ask("NOT_FOUND, but see [7] and [1].", [RESOURCE], "What is work_mem's default?", "off")
    assert not answer.not_found and answer.text == "NOT_FOUND, but see  and [1]."
    assert answer.guards == [] and answer.guard_profile["guards"] == []


def test_small_model_runs_every_rule_in_order_and_overrides_apply() -> None:
    assert PROFILES["small-model"] == profile_names("small-model")
    assert profile_names("endpoint", enable=["entities", "shares_terms"]) == (
        "shares_terms", "model_not_found", "entities", "relay"
    )  # fmt: skip
    assert "ungrounded_names" not in profile_names("small-model", disable=["ungrounded_names"])
    chain = GuardChain.from_profile("endpoint", enable=["source_talk"], disable=["model_not_found"])
    assert chain.describe() == {
        "profile": "endpoint", "guards": ["source_talk", "relay"], "enabled": ["source_talk"],
        "disabled": ["model_not_found"]
    }  # fmt: skip
    with pytest.raises(ValueError, match=r"unknown guard 'ungrounded_nums'; the guards are: shares_terms, "):
        profile_names("endpoint", enable=["ungrounded_nums"])
    with pytest.raises(ValueError, match=r"unknown guard profile 'strong'; use one of small-model, endpoint, off"):
        profile_names("strong")


def test_the_profile_follows_the_model_unless_set() -> None:
    local, remote = LLMEndpoint(), LLMEndpoint(api_base="http://127.0.0.1:9/v1")
    assert (local.effective_guards, remote.effective_guards) == ("small-model", "endpoint")
    assert local.guard_names == PROFILES["small-model"] and remote.guard_names == ("model_not_found", "relay")
    # the answer check is the small-model profile's gate: on for the local model, off for endpoints, unless set
    assert local.effective_answer_check is not None and remote.effective_answer_check is None
    assert LLMEndpoint(guards="off").effective_answer_check is None
    assert LLMEndpoint(guards="off", answer_check=True).effective_answer_check is not None
    assert LLMEndpoint(api_base="http://x/v1", guards="small-model").guard_names == PROFILES["small-model"]
    with pytest.raises(ValueError, match="unknown guard 'nope'"):
        LLMEndpoint(guards_disable=["nope"])


def test_the_stream_filter_follows_the_profile() -> None:
    # the endpoint's shows the text as it comes; the small model's holds it until the guards judged all of it
    from ragidx.agent.answer import Answer

    text = "Use Table > Insert [1]. Then pick the style you want for the new table from the list"
    final = Answer(question="q", text=text + ".", articles=[{"title": "Tables"}])
    endpoint = GuardChain.from_profile("endpoint").stream_filter()
    assert endpoint.feed(text) == "Use Table > Insert [1]." and endpoint.finish(final) == text[23:] + "."
    small = GuardChain.from_profile("small-model").stream_filter()
    assert small.feed(text) == "" and small.finish(final) == final.text
    assert set(GUARD_NAMES) >= {"entities", "echoed_source_list", "source_talk"}
