"""OpenAI's wire format: a request's messages read into a question and its history, an Answer written out."""

from __future__ import annotations

import pytest

from ragidx.agent.answer import Answer, Citation
from ragidx.server.openai_format import RequestError, chat_completion, read_conversation

CITED = Answer(
    question="q",
    text="Choose Insert - Table of Contents [1].",
    citations=[Citation(1, "kb-toc", "Creating a Table of Contents", "https://help/toc")],
    articles=[{"kb_id": "kb-toc", "title": "Creating a Table of Contents", "url": "https://help/toc",
               "metadata": {"rerank_score": 0.9, "normalized_rank": 0.0, "article_rank": 0}}],
)  # fmt: skip


def test_the_last_user_message_is_the_question_and_the_turns_before_it_the_history() -> None:
    question, history = read_conversation(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "How do I add a TOC?"}]},
            {"role": "assistant", "content": "Choose Insert [1].\n\nSources:\n[1] TOC — https://help/toc"},
            {"role": "user", "content": "And update it?"},
        ]
    )
    assert question == "And update it?"
    assert [(m.role.value, m.content) for m in history] == [
        ("user", "How do I add a TOC?"),
        ("assistant", "Choose Insert [1]."),  # the Sources block this server added is not read again
    ]


@pytest.mark.parametrize(
    ("messages", "wanted"),
    [
        (None, "non-empty list"),
        ([{"role": "tool", "content": "x"}, {"role": "user", "content": "q"}], "role 'tool'"),
        (["hi"], "must be an object"),
        ([{"role": "user", "content": 3}], "string or a list"),
        ([{"role": "user", "content": "x" * 20}], "at most 10"),
    ],
)
def test_requests_it_cannot_answer_are_refused_with_the_reason(messages: object, wanted: str) -> None:
    with pytest.raises(RequestError, match=wanted):
        read_conversation(messages, max_question_chars=10)


def test_a_completion_carries_the_citations_twice_in_the_text_and_in_the_extra_field() -> None:
    body = chat_completion(CITED, model="ragidx")
    content = body["choices"][0]["message"]["content"]
    assert content == CITED.text + "\n\nSources:\n[1] Creating a Table of Contents — https://help/toc"
    extra = body["ragidx"]
    assert extra["citations"] == [{"number": 1, "kb_id": "kb-toc", "title": "Creating a Table of Contents",
                                   "url": "https://help/toc", "where": "", "quote": ""}]  # fmt: skip
    assert extra["sources"][0]["normalized_rank"] == 0.0 and extra["not_found"] is False


def test_filters_are_read_from_an_object_or_a_list_of_conditions() -> None:
    from llama_index.core.vector_stores.types import FilterOperator

    from ragidx.server.openai_format import read_filters

    as_object = read_filters({"product": "writer", "version": [7, 7.5], "draft": False})
    assert as_object is not None
    assert [(f.key, f.operator, f.value) for f in as_object.filters] == [  # type: ignore[union-attr]
        ("product", FilterOperator.EQ, "writer"),
        ("version", FilterOperator.IN, [7, 7.5]),
        ("draft", FilterOperator.EQ, "false"),
    ]
    as_list = read_filters(["version>=7.4", "product not in calc,impress"])
    assert as_list is not None
    assert [(f.key, f.operator, f.value) for f in as_list.filters] == [  # type: ignore[union-attr]
        ("version", FilterOperator.GTE, "7.4"),
        ("product", FilterOperator.NIN, ["calc", "impress"]),
    ]
    assert read_filters(None) is None and read_filters({}) is None and read_filters([]) is None
    with pytest.raises(RequestError, match="a number must be finite") as caught:
        read_filters({"version": float("nan")})
    assert caught.value.param == "filters"
