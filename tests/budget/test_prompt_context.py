"""The context block of LlamaIndex's own templates is found in the prompt they produce; the middle cut fits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.chat_engine.condense_plus_context import (
    DEFAULT_CONTEXT_PROMPT_TEMPLATE,
    DEFAULT_CONTEXT_REFINE_PROMPT_TEMPLATE,
)
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.prompts.chat_prompts import CHAT_REFINE_PROMPT, CHAT_TEXT_QA_PROMPT, CHAT_TREE_SUMMARIZE_PROMPT
from llama_index.core.prompts.default_prompts import (
    DEFAULT_REFINE_PROMPT,
    DEFAULT_TEXT_QA_PROMPT,
    DEFAULT_TREE_SUMMARIZE_PROMPT,
)

from ragidx.budget.prompt_context import ELISION, ContextMarker, find_context, truncate_middle
from ragidx.providers.tokenizer import TokenCounter

CONTEXT = "title: Tables\n\nPress Ctrl+F12 to insert a table.\n\nA second paragraph ---- with dashes."
QUESTION = "How do I insert a table?"


def _messages(template: BasePromptTemplate) -> list[ChatMessage]:
    values = {"context_str": CONTEXT, "context_msg": CONTEXT, "query_str": QUESTION, "existing_answer": "Earlier."}
    return template.format_messages(**{k: v for k, v in values.items() if k in template.template_vars})


@pytest.mark.parametrize(
    ("template", "marker"),
    [
        (DEFAULT_TEXT_QA_PROMPT, "text QA"),
        (CHAT_TEXT_QA_PROMPT, "text QA"),
        (DEFAULT_TREE_SUMMARIZE_PROMPT, "text QA"),
        (CHAT_TREE_SUMMARIZE_PROMPT, "text QA"),
        (DEFAULT_REFINE_PROMPT, "refine"),
        (CHAT_REFINE_PROMPT, "chat refine"),
    ],
)
def test_the_context_and_question_of_llamaindex_default_templates_are_found(
    template: BasePromptTemplate, marker: str
) -> None:
    messages = _messages(template)
    found = find_context(messages)
    assert found is not None and found.marker.name == marker
    assert found.block == CONTEXT and found.question == QUESTION
    host = messages[found.index]
    assert found.host_text(found.block) == host.content  # before + block + after is the message as it came
    assert CONTEXT not in found.host_text("")


@pytest.mark.parametrize("template", [DEFAULT_CONTEXT_PROMPT_TEMPLATE, DEFAULT_CONTEXT_REFINE_PROMPT_TEMPLATE])
def test_the_condense_plus_context_system_message_is_found_and_the_user_message_is_the_question(template: str) -> None:
    system = PromptTemplate(template).format(context_str=CONTEXT, context_msg=CONTEXT, existing_answer="Earlier.")
    messages = [
        ChatMessage(role="system", content=system),
        ChatMessage(role="user", content="What about charts?"),
        ChatMessage(role="assistant", content="Charts are inserted from the Insert menu."),
        ChatMessage(role="user", content=QUESTION),
    ]
    found = find_context(messages)
    assert found is not None and found.index == 0 and found.marker.name.startswith("condense-plus-context")
    assert found.block == CONTEXT and found.question == QUESTION


def test_a_prompt_without_a_known_template_has_no_context_and_a_marker_of_ones_own_is_recognised() -> None:
    messages = [ChatMessage(role="user", content=f"<docs>\n{CONTEXT}\n</docs>\nQuestion: {QUESTION}")]
    assert find_context(messages) is None
    found = find_context(messages, [ContextMarker("mine", "<docs>", "</docs>")])
    assert found is not None and found.block == CONTEXT and found.question.endswith(QUESTION)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 400), st.integers(1, 300), st.sampled_from(["word ", "таблица ", "a\n", "😀 x "]))
def test_the_middle_cut_fits_and_keeps_the_start_and_the_end(words: int, limit: int, unit: str) -> None:
    counter = TokenCounter()
    text = "START " + unit * words + " END"
    out = truncate_middle(text, limit, counter)
    assert counter.count(out) <= limit
    if counter.count(text) <= limit:
        assert out == text
    elif limit >= 20:
        assert out.startswith("START") and out.endswith("END") and ELISION in out
