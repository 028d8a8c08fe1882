"""FlashReranker as a LlamaIndex component: top_n (max_topics deprecated), replaceable prompts, to_dict/from_dict,
ranks by its own order."""

from __future__ import annotations

import json

import pytest
from llama_index.core.prompts import PromptTemplate

from ragidx.retrieval.flash import FlashReranker
from ragidx.retrieval.flash.prompts import SYSTEM_PROMPT, USER_PROMPT
from tests.fakes.scripted_llm import ScriptedLLM
from tests.retrieval.flash.helpers import article_nodes, make_reranker, sent_text, tool_call


def answer(*ids: int) -> str:
    return json.dumps({"topics": [{"id": i, "reason": f"reason {i}"} for i in ids]})


# --- top_n, and max_topics as its deprecated name ------------------------------------------------------
def test_top_n_caps_the_selection() -> None:
    flash = make_reranker(ScriptedLLM([answer(4, 2, 5, 1)]), top_n=2)

    out = flash.postprocess_nodes(article_nodes(6), query_str="q")

    assert [n.node.metadata["kb_id"] for n in out] == ["kb-4", "kb-2"]
    assert "At most 2 topics" in sent_text(flash.llm, 0)  # type: ignore[arg-type]


def test_max_topics_still_works_and_warns() -> None:
    with pytest.warns(DeprecationWarning, match="max_topics is now top_n"):
        flash = FlashReranker(ScriptedLLM([answer(3, 1, 2)]), max_topics=2)
    assert flash.top_n == 2
    with pytest.warns(DeprecationWarning, match="top_n"):
        assert flash.max_topics == 2
    assert len(flash.postprocess_nodes(article_nodes(4), query_str="q")) == 2
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="disagree"):
        FlashReranker(ScriptedLLM([]), max_topics=2, top_n=3)


# --- ranks by flash's order ---------------------------------------------------------------------------
def test_the_output_s_ranks_are_flash_s_order_not_the_candidates() -> None:
    candidates = [
        n.model_copy(update={"node": n.node.model_copy(update={"metadata": {**n.node.metadata, "article_rank": i}})})
        for i, n in enumerate(article_nodes(5))
    ]
    flash = make_reranker(ScriptedLLM([answer(4, 1, 3)]), top_n=3)

    out = flash.postprocess_nodes(candidates, query_str="q")

    meta = [n.node.metadata for n in out]
    assert [m["kb_id"] for m in meta] == ["kb-4", "kb-1", "kb-3"]
    assert [m["article_rank"] for m in meta] == [0, 1, 2]
    assert [m["normalized_rank"] for m in meta] == [0.0, 0.5, 1.0]
    assert [m["rerank_score"] for m in meta] == [n.score for n in out]
    assert [c.node.metadata["article_rank"] for c in candidates] == [0, 1, 2, 3, 4]  # inputs untouched


def test_a_fallback_is_ranked_too() -> None:
    flash = make_reranker(ScriptedLLM([RuntimeError("502 bad gateway")]), top_n=3)

    out = flash.postprocess_nodes(article_nodes(5), query_str="q")

    assert [(n.node.metadata["kb_id"], n.node.metadata["article_rank"]) for n in out] == [
        ("kb-1", 0),
        ("kb-2", 1),
        ("kb-3", 2),
    ]


# --- prompts (LlamaIndex's PromptMixin) ---------------------------------------------------------------
def test_the_prompts_are_listed_and_replaceable() -> None:
    llm = ScriptedLLM([answer(2)])
    flash = make_reranker(llm)
    assert sorted(flash.get_prompts()) == ["system_prompt", "tool_limit_prompt", "user_prompt"]
    assert flash.get_prompts()["system_prompt"].get_template() == SYSTEM_PROMPT

    flash.update_prompts(
        {
            "system_prompt": PromptTemplate('Pick at most {top_n}. Reply {"topics": [{"id": 1, "reason": "r"}]}.'),
            "user_prompt": PromptTemplate("Q: {query}\n{candidates}"),
        }
    )
    out = flash.postprocess_nodes(article_nodes(3), query_str="tables")

    sent = sent_text(llm, 0)
    assert sent.startswith('Pick at most 5. Reply {"topics": [{"id": 1, "reason": "r"}]}.\nQ: tables\n[ID:1]')
    assert "Current date" not in sent
    assert [n.node.metadata["kb_id"] for n in out] == ["kb-2"]


def test_a_prompt_given_at_construction_as_text_is_used() -> None:
    llm = ScriptedLLM([answer(1)])
    make_reranker(
        llm, prompts={"user_prompt": "Today {today}. {query}? {count} of them:\n{candidates}"}
    ).postprocess_nodes(article_nodes(2), query_str="why")
    assert "Today 2026-01-04. why? 2 of them:\n[ID:1]" in sent_text(llm, 0)


def test_a_bad_prompt_is_refused_with_the_names() -> None:
    flash = make_reranker(ScriptedLLM([]))
    with pytest.raises(ValueError, match="unknown flash prompt 'answer_prompt'; the prompts are system_prompt"):
        flash.update_prompts({"answer_prompt": PromptTemplate("x")})
    with pytest.raises(ValueError, match=r"'user_prompt' must use \{candidates\}"):
        flash.update_prompts({"user_prompt": PromptTemplate("Query: {query}")})
    assert flash.get_prompts()["user_prompt"].get_template() == USER_PROMPT  # nothing was changed


# --- to_dict / from_dict -------------------------------------------------------------------------------
def test_settings_and_replaced_prompts_survive_to_dict_and_from_dict() -> None:
    flash = FlashReranker(
        ScriptedLLM([]),
        top_n=3,
        max_candidates=12,
        tool_mode="forced",
        response_format="json_object",
        prompts={"tool_limit_prompt": "No more {tool_name} calls."},
    )

    data = flash.to_dict()
    llm = ScriptedLLM([answer(2, 1)])
    rebuilt = FlashReranker.from_dict(data, llm=llm)
    from_json = FlashReranker.from_json(flash.to_json(), llm=llm)

    assert data["class_name"] == "FlashReranker"
    assert (data["top_n"], data["max_candidates"], data["tool_mode"]) == (3, 12, "forced")
    assert data["prompts"] == {"tool_limit_prompt": "No more {tool_name} calls."}
    assert rebuilt.model_dump() == flash.model_dump() == from_json.model_dump()
    assert rebuilt.get_prompts()["tool_limit_prompt"].get_template() == "No more {tool_name} calls."
    assert rebuilt.llm is llm
    assert "prompts" not in make_reranker(ScriptedLLM([])).to_dict()  # defaults are not written out


def test_from_dict_without_the_model_says_how_to_give_it() -> None:
    data = FlashReranker(ScriptedLLM([]), top_n=2).to_dict()
    with pytest.raises(TypeError, match=r"FlashReranker\.from_dict\(data, llm=llm\)"):
        FlashReranker.from_dict(data)


def test_an_old_dict_with_max_topics_is_read() -> None:
    with pytest.warns(DeprecationWarning):
        rebuilt = FlashReranker.from_dict({"max_topics": 4, "class_name": "FlashReranker"}, llm=ScriptedLLM([]))
    assert rebuilt.top_n == 4


def test_the_tool_limit_prompt_is_sent_when_the_calls_are_used_up() -> None:
    llm = ScriptedLLM([tool_call(2), answer(2)])
    flash = make_reranker(llm, max_tool_calls=1, prompts={"tool_limit_prompt": "Stop: {max_tool_calls} used."})

    flash.postprocess_nodes(article_nodes(3), query_str="q")

    assert sent_text(llm, 1).endswith("Stop: 1 used.")
