"""Query contextualization: standalone rewrite from the conversation, never a guess, never worse."""

from __future__ import annotations

import pytest
from llama_index.core.base.llms.types import ChatMessage

from ragidx.retrieval.flash import QueryContextualizer
from tests.fakes.scripted_llm import ScriptedLLM

HISTORY = [ChatMessage(role="user", content="how do I back up mysql?"), "assistant: use mysqldump"]


def test_rewrites_a_follow_up_into_a_standalone_query() -> None:
    llm = ScriptedLLM(["How do I back up PostgreSQL?"])
    out = QueryContextualizer(llm).contextualize("and for postgres?", HISTORY)

    assert (out.query, out.rewritten, out.original) == (
        "How do I back up PostgreSQL?",
        True,
        "and for postgres?",
    )


def test_prompt_forbids_guessing_and_delimits_the_conversation() -> None:
    llm = ScriptedLLM(["x"])
    QueryContextualizer(llm).contextualize("what about the meniscus?", HISTORY)
    system, user = (m.content or "" for m in llm.calls[0].messages)

    assert "Do NOT guess" in system
    assert "verbatim" in system
    assert "do not expand abbreviations" in system
    assert "<<<CONVERSATION>>>\nuser: how do I back up mysql?\nassistant: use mysqldump\n<<<END CONVERSATION>>>" in user
    assert "Latest message: what about the meniscus?" in user


def test_without_conversation_the_message_is_used_as_is_without_an_llm_call() -> None:
    llm = ScriptedLLM([])
    out = QueryContextualizer(llm).contextualize("rotate kms keys", [])
    assert (out.query, out.rewritten, llm.calls) == ("rotate kms keys", False, [])


@pytest.mark.parametrize(
    ("step", "error"),
    [
        (RuntimeError("502"), "502"),
        ("   ", "empty rewrite"),
        ("word " * 200, "too long"),
    ],
)
def test_failures_fall_back_to_the_original_message(step: object, error: str) -> None:
    out = QueryContextualizer(ScriptedLLM([step])).contextualize("and for postgres?", HISTORY)
    assert (out.query, out.rewritten) == ("and for postgres?", False)
    assert error in (out.error or "")


def test_labels_and_quotes_around_the_rewrite_are_removed() -> None:
    out = QueryContextualizer(
        ScriptedLLM(['Standalone query: "How to back up PostgreSQL?"\nBecause...'])
    ).contextualize("and for postgres?", HISTORY)
    assert out.query == "How to back up PostgreSQL?"
