"""ContextBudgetPostprocessor: articles by rank into one prompt, the window from the LLM or explicit limits."""

from __future__ import annotations

import pytest
from llama_index.core.prompts import PromptTemplate
from llama_index.core.schema import MetadataMode, NodeRelationship, NodeWithScore, RelatedNodeInfo, TextNode

from ragidx.article import Article
from ragidx.budget.accounting import PromptAccountant
from ragidx.budget.postprocessor import ContextBudgetPostprocessor
from ragidx.retrieval.article_grouper import article_to_node
from tests.budget.helpers import text_of_tokens
from tests.fakes.scripted_llm import ScriptedLLM

QUESTION = "Which key inserts a table?"
ANSWER = "Press Ctrl+F12 to insert a table."
COUNTER = PromptAccountant().tokens


def chunk(doc: str, text: str, score: float | None, start: int | None = None) -> NodeWithScore:
    node = TextNode(text=text, metadata={"file_name": f"{doc}.txt"}, start_char_idx=start)
    node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=doc)
    return NodeWithScore(node=node, score=score)


def article_node(kb_id: str, content: str, rank: int, score: float) -> NodeWithScore:
    meta = {"article_rank": rank, "normalized_rank": float(rank), "rerank_score": score}
    return article_to_node(Article(kb_id, f"Title {kb_id}", f"https://kb/{kb_id}", content, metadata=meta), score)


def test_chunks_of_a_stock_index_become_one_node_per_document_ranked_by_score() -> None:
    nodes = [
        chunk("b", "Bravo text.", 0.5),
        chunk("a", "Second part of alpha.", 0.9, start=40),
        chunk("a", "First part of alpha.", 0.3, start=0),
        chunk("b", "Bravo text.", 0.2),  # the same text twice: kept once
    ]
    post = ContextBudgetPostprocessor(context_window=8192, num_output=256)
    out = post.postprocess_nodes(nodes, query_str=QUESTION)

    assert [n.node.ref_doc_id for n in out] == ["a", "b"] and [n.score for n in out] == [0.9, 0.5]
    assert out[0].node.get_content() == "First part of alpha.\n\nSecond part of alpha."  # document order
    assert out[1].node.get_content() == "Bravo text."
    assert [(n.node.metadata["article_rank"], n.node.metadata["normalized_rank"]) for n in out] == [(0, 0.0), (1, 1.0)]
    llm_view = out[0].node.get_content(MetadataMode.LLM)
    assert "file_name: a.txt" in llm_view and "article_rank" not in llm_view  # the budget's keys stay hidden
    assert post.last_report is not None and post.last_report.path == ["under_trigger"]
    assert nodes[0].node.get_content() == "Bravo text."  # inputs untouched


def test_ragidx_article_nodes_keep_their_own_rank_and_are_deduplicated_by_kb_id() -> None:
    first, second = article_node("x", "Text of x.", 0, 0.2), article_node("y", "Text of y.", 1, 0.9)
    out = ContextBudgetPostprocessor(context_window=8192, num_output=256).postprocess_nodes(
        [first, second, article_node("x", "Text of x.", 0, 0.2)], query_str=QUESTION
    )
    assert [n.node.node_id for n in out] == ["x", "y"]  # flash put x first despite its lower score
    assert [n.node.metadata["title"] for n in out] == ["Title x", "Title y"]


def test_articles_over_the_window_are_compressed_by_rank_guided_by_the_question_and_fit_one_prompt() -> None:
    sizes = [900, 900, 900, 900]
    nodes = []
    for i, size in enumerate(sizes):
        body = text_of_tokens(size, seed=i)
        if i == 0:  # the answer in the middle of the best article
            half = len(body) // 2
            body = body[:half] + " " + ANSWER + " " + body[half:]
        nodes.append(chunk(f"doc{i}", body, 1.0 - i / 10))
    llm = ScriptedLLM(["ok"])
    llm.context_window, llm.num_output = 2048, 256
    post = ContextBudgetPostprocessor(llm)

    out = post.postprocess_nodes(nodes, query_str=QUESTION)

    report = post.last_report
    assert report is not None and "compressed" in report.path
    assert report.context_window == 2048 and report.reserved_output_tokens == 256 + 500  # LlamaIndex's padding
    assert report.tokens_after <= report.target_tokens < 2048
    assert out[0].node.ref_doc_id == "doc0" and ANSWER in out[0].node.get_content()
    kept = [COUNTER.count(n.node.get_content()) for n in out]
    assert kept == sorted(kept, reverse=True) and kept[0] < 900  # the best keeps the most
    assert out[0].node.metadata["compressed"] is True and out[0].node.metadata["original_tokens"] > kept[0]
    context = "\n\n".join(n.node.get_content(MetadataMode.LLM) for n in out)
    assert COUNTER.count(context) < 2048 - 256 - 500 - 150  # room for the template and question besides


def test_explicit_limits_win_over_the_llm_and_a_window_is_required() -> None:
    llm = ScriptedLLM(["ok"])
    llm.context_window, llm.num_output = 32_000, 256
    post = ContextBudgetPostprocessor(llm, context_window=4096, num_output=128, reserve_tokens=1000)
    assert post.window() == (4096, 128)
    post.postprocess_nodes([chunk("a", text_of_tokens(3000), 0.5)], query_str=QUESTION)
    assert post.last_report is not None and post.last_report.reserved_output_tokens == 128 + 500 + 1000
    with pytest.raises(ValueError, match="pass llm=.* or context_window="):
        ContextBudgetPostprocessor()


def test_a_template_without_a_context_variable_is_refused() -> None:
    with pytest.raises(ValueError, match="no context variable"):
        ContextBudgetPostprocessor(context_window=4096, prompt_templates=[PromptTemplate("Answer {query_str}")])


def test_a_template_of_ones_own_is_the_fixed_part() -> None:
    big = PromptTemplate("Instructions. " * 400 + "\n{context_str}\nQ: {query_str}")
    nodes = [chunk("a", text_of_tokens(2500), 0.5)]
    default = ContextBudgetPostprocessor(context_window=4096, num_output=256)
    own = ContextBudgetPostprocessor(context_window=4096, num_output=256, prompt_templates=[big])
    outs = [p.postprocess_nodes(nodes, query_str=QUESTION) for p in (default, own)]
    sizes = [COUNTER.count(out[0].node.get_content()) for out in outs]
    assert sizes[0] == 2500 and sizes[1] < 2100  # the long instructions take the article's room


def test_it_survives_llamaindex_serialization_with_the_llm_given_again() -> None:
    llm = ScriptedLLM(["ok"])
    llm.context_window, llm.num_output = 2048, 256
    post = ContextBudgetPostprocessor(llm, reserve_tokens=100, target_pct=0.6, trigger_pct=0.7)
    data = post.to_dict()
    assert data["class_name"] == "ContextBudgetPostprocessor" and data["reserve_tokens"] == 100
    again = ContextBudgetPostprocessor.from_dict(data, llm=llm)
    nodes = [chunk("a", text_of_tokens(3000), 0.5)]
    texts = [p.postprocess_nodes(nodes, query_str=QUESTION)[0].node.get_content() for p in (post, again)]
    assert texts[0] == texts[1] and again.last_report is not None and again.last_report.target_pct == 0.6


def test_a_template_without_the_question_counts_it_after_the_template_and_other_variables_stay_empty() -> None:
    # CondensePlusContextChatEngine's context prompt is a system message; the question follows it as a user message
    template = PromptTemplate("Be kind. {extra}\nDocuments:\n{context_str}\nAnswer from them.")
    post = ContextBudgetPostprocessor(context_window=4096, num_output=256, prompt_templates=[template])
    question = "word " * 1500
    post.postprocess_nodes([chunk("a", text_of_tokens(2000), 0.5)], query_str=question)
    report = post.last_report
    assert report is not None and report.fixed_tokens > COUNTER.count(question) and "compressed" in report.path
