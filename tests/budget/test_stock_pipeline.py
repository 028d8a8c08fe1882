"""Issue 56's target: stock LlamaIndex engines with ragidx's postprocessors and budget, no Engine, 300 articles.

A ``VectorStoreIndex`` over 300 articles of the bundled LibreOffice sample (embedded by the hashing fake), the
chain ``[OfflineChunkReranker, ArticleGrouper(docstore=index.docstore), ContextBudgetPostprocessor]`` in a stock
``RetrieverQueryEngine`` and ``CondensePlusContextChatEngine``, and a model with a 2,048-token window behind
``BudgetedLLM``: every prompt the model receives fits the window with the answer's room, the compact synthesizer
answers in one call, and that call holds the top article.
"""

from __future__ import annotations

import itertools
import json
from functools import lru_cache
from pathlib import Path

from llama_index.core import Document, VectorStoreIndex
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.chat_engine import CondensePlusContextChatEngine
from llama_index.core.chat_engine.condense_plus_context import DEFAULT_CONTEXT_PROMPT_TEMPLATE
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.prompts import PromptTemplate
from llama_index.core.query_engine import RetrieverQueryEngine

from ragidx import ArticleGrouper, ContextBudgetPostprocessor, OfflineChunkReranker
from ragidx.agent.budgeted_llm import BudgetedLLM
from ragidx.budget import ContextBudget, PromptAccountant
from tests.fakes.hash_embedding import HashEmbedding
from tests.fakes.scripted_llm import ScriptedLLM, text_of

KB = Path(__file__).resolve().parents[2] / "ragidx" / "data" / "kb" / "libreoffice_en_sample.jsonl"
WINDOW, NUM_OUTPUT = 2048, 256
QUESTION = "How do I apply a digital signature to a document?"
ACC = PromptAccountant()


@lru_cache(maxsize=1)
def index() -> VectorStoreIndex:
    with KB.open(encoding="utf-8") as lines:
        rows = [json.loads(line) for line in itertools.islice(lines, 300)]
    documents = [Document(id_=r["id"], text=r["text"], metadata={"title": r["title"], "url": r["url"]}) for r in rows]
    return VectorStoreIndex.from_documents(documents, embed_model=HashEmbedding())


def small_llm() -> tuple[ScriptedLLM, BudgetedLLM]:
    inner = ScriptedLLM(["Choose File - Digital Signatures."], cycle=True)
    inner.context_window, inner.num_output = WINDOW, NUM_OUTPUT
    return inner, BudgetedLLM(inner, ContextBudget())


def chain(llm: BudgetedLLM, *budget: ContextBudgetPostprocessor) -> list:
    grouper = ArticleGrouper(docstore=index().docstore, top_n=5)
    return [OfflineChunkReranker(top_n=10), grouper, *budget]


def assert_every_prompt_fits(inner: ScriptedLLM, llm: BudgetedLLM) -> None:
    assert inner.calls and len(inner.calls) == len(llm.reports)
    for call in inner.calls:
        assert ACC.count_prompt(call.messages) + NUM_OUTPUT <= WINDOW


def test_a_stock_query_engine_answers_from_the_top_article_in_one_prompt_inside_a_2k_window() -> None:
    inner, llm = small_llm()
    budget = ContextBudgetPostprocessor(llm)
    engine = RetrieverQueryEngine.from_args(
        index().as_retriever(similarity_top_k=20), llm=llm, node_postprocessors=chain(llm, budget)
    )
    reranker, grouper = chain(llm)
    chunks = reranker.postprocess_nodes(engine.retriever.retrieve(QUESTION), query_str=QUESTION)
    grouped = grouper.postprocess_nodes(chunks, query_str=QUESTION)

    response = engine.query(QUESTION)

    assert_every_prompt_fits(inner, llm)
    assert len(inner.calls) == 1  # every article kept in one prompt: no refine calls
    prompt = "".join(text_of(m) for m in inner.calls[0].messages)
    top = response.source_nodes[0].node
    assert top.node_id == grouped[0].node.node_id  # the grouper's best article is the budget's best
    assert f"title: {top.metadata['title']}" in prompt and top.get_content()[:300] in prompt
    report = budget.last_report
    assert report is not None and report.tokens_after <= report.target_tokens < WINDOW - NUM_OUTPUT
    assert "compressed" in report.path and report.article_tokens_before > WINDOW  # five articles did not fit
    ranks = [(n.node.metadata["article_rank"], n.node.metadata["normalized_rank"]) for n in response.source_nodes]
    n = len(ranks)
    assert n >= 2 and ranks == [(i, i / (n - 1)) for i in range(n)]


def test_without_the_budget_the_same_chain_takes_several_calls_to_read_the_articles() -> None:
    inner, llm = small_llm()
    engine = RetrieverQueryEngine.from_args(
        index().as_retriever(similarity_top_k=20), llm=llm, node_postprocessors=chain(llm)
    )
    engine.query(QUESTION)
    assert_every_prompt_fits(inner, llm)  # BudgetedLLM alone keeps each prompt inside the window ...
    assert len(inner.calls) >= 3  # ... but LlamaIndex's PromptHelper spreads the articles over refine calls


def test_a_stock_chat_engine_with_history_keeps_every_prompt_inside_a_2k_window() -> None:
    inner, llm = small_llm()
    history = [
        ChatMessage(role="user", content="How do I export a document as PDF?"),
        ChatMessage(role="assistant", content="Choose File - Export as PDF."),
    ]
    reserve = sum(ACC.count_message(m) for m in history)
    budget = ContextBudgetPostprocessor(
        llm, prompt_templates=[PromptTemplate(DEFAULT_CONTEXT_PROMPT_TEMPLATE)], reserve_tokens=reserve
    )
    chat = CondensePlusContextChatEngine.from_defaults(
        index().as_retriever(similarity_top_k=20),
        llm=llm,
        memory=ChatMemoryBuffer.from_defaults(chat_history=history, token_limit=WINDOW - 256),
        node_postprocessors=chain(llm, budget),
    )

    response = chat.chat("And a pivot table?")

    assert_every_prompt_fits(inner, llm)
    assert len(inner.calls) == 2  # the question condensed, then one answer
    system = text_of(inner.calls[-1].messages[0])
    assert response.source_nodes and response.source_nodes[0].node.get_content()[:300] in system
