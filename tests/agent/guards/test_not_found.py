"""The one reading of "the model found no answer", shared by the agent and the answer evaluation."""

from __future__ import annotations

import pytest

from ragidx.agent.guards.base import GuardInput
from ragidx.agent.guards.not_found import ModelSaysNotFound, says_not_found, split_not_found
from ragidx.evaluation.answers import says_not_found as evaluation_says_not_found


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("NOT_FOUND", (True, "")),
        ("  Not found.", (True, "")),
        ("Use Table > Insert Table [1].\n\nNOT_FOUND", (False, "Use Table > Insert Table [1].")),
        ("If the style is not found, create it [1].", (False, "If the style is not found, create it [1].")),
    ],
)
def test_not_found_is_the_replys_opening_not_a_stray_token(reply: str, expected: tuple[bool, str]) -> None:
    assert split_not_found(reply) == expected


@pytest.mark.parametrize(
    ("reply", "not_found"),
    [
        ("NOT_FOUND", True),
        ("The articles do not provide information about the pg_stat_io view. [1]", True),
        ("The information is not mentioned in the sources.", True),
        ("It cannot be determined from the articles.", True),
        ("В статьях нет информации об этом.", True),
        ("The default is 4MB [1]. The articles do not mention the maximum.", False),  # an answer, then a gap
        ("Yes, both were American [3].", False),
    ],
)
def test_a_reply_that_says_the_articles_do_not_answer_is_not_found(reply: str, not_found: bool) -> None:
    assert split_not_found(reply)[0] is not_found


@pytest.mark.parametrize(
    "reply",
    [
        "The articles do not state it directly, but shared_buffers defaults to 128MB [1].",
        "The page doesn't give a figure for Windows; on Linux the default is 128MB [1].",
    ],
)
def test_a_cited_reply_is_an_answer_when_citations_count(reply: str) -> None:
    assert split_not_found(reply)[0]  # the small model's reading: its first sentence declines
    assert split_not_found(reply, cited_is_answer=True) == (False, reply)
    assert not ModelSaysNotFound(cited_is_answer=True).check(GuardInput("q", reply, [])).not_found


def test_a_bare_not_found_is_not_found_under_every_reading() -> None:
    for cited in (False, True):
        assert split_not_found("NOT_FOUND [1]", cited_is_answer=cited) == (True, "")
        assert says_not_found("The articles do not mention it.", cited_is_answer=cited)


def test_the_guard_drops_a_stray_token_and_says_so() -> None:
    result = ModelSaysNotFound().check(GuardInput("q", "Use Table [1].\n\nNOT_FOUND", []))
    assert (result.text, result.not_found) == ("Use Table [1].", False) and result.reason is not None
    declined = ModelSaysNotFound().check(GuardInput("q", "NOT_FOUND", []))
    assert declined.not_found and declined.text == ""


@pytest.mark.parametrize(
    ("text", "not_found"),
    [
        ("I don't know.", True),
        ("В статьях нет информации об этом.", True),
        ("If the style is not found, create it [1].", False),
        ("The default is 4MB [1]. The articles do not mention the maximum.", False),
    ],
)
def test_the_evaluation_reads_not_found_as_the_agent_does(text: str, not_found: bool) -> None:
    assert evaluation_says_not_found(text) is not_found
    assert split_not_found(text, cited_is_answer=True)[0] is not_found
