"""Property: in LlamaIndex's own engines, with ragidx's budget, no prompt the LLM receives passes its window.

The engines are stock: ``RetrieverQueryEngine`` with the compact and the refine synthesizer, one whose
``PromptHelper`` believes in a window four times the model's (a ``Settings.context_window`` left at another
model's: the synthesizer stuffs far more context into a prompt than fits), and ``CondensePlusContextChatEngine``
with a chat history. The LLM is ``BudgetedLLM`` around a recording scripted model, with or without
``ContextBudgetPostprocessor`` last in the engine's postprocessors; windows from 2K to 16K tokens. Every prompt
is counted as sent, with the real tokenizer (tiktoken ``cl100k_base``, per-message overhead included), and must
leave the answer's ``num_output`` free. With the postprocessor, a compact synthesizer answers in one call that
holds the top article.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.chat_engine import CondensePlusContextChatEngine
from llama_index.core.chat_engine.condense_plus_context import DEFAULT_CONTEXT_PROMPT_TEMPLATE
from llama_index.core.indices.prompt_helper import PromptHelper
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.prompts import PromptTemplate
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.response_synthesizers import get_response_synthesizer

from ragidx.agent.budgeted_llm import BudgetedLLM
from ragidx.budget import ContextBudget, ContextBudgetPostprocessor, PromptAccountant
from tests.budget.helpers import text_of_tokens
from tests.fakes.hash_embedding import HashEmbedding
from tests.fakes.scripted_llm import ScriptedLLM, text_of

KB = Path(__file__).resolve().parents[2] / "ragidx" / "data" / "kb" / "libreoffice_en_sample.jsonl"
ACC = PromptAccountant()
QUESTIONS = (
    "How do I insert a table of contents?",
    "How do I number pages?",
    "Which key updates all fields?",
    "How do I create a pivot table in Calc?",
)
ENGINES = ("compact", "refine", "stuffed", "chat")


@lru_cache(maxsize=1)
def index() -> VectorStoreIndex:
    """120 LibreOffice articles in 512-token chunks, embedded by the hashing fake."""
    docs = []
    with KB.open(encoding="utf-8") as lines:
        for line in itertools.islice(lines, 120):
            row = json.loads(line)
            docs.append(Document(text=row["text"], doc_id=row["id"], metadata={"title": row["title"]}))
    splitter = SentenceSplitter(chunk_size=512, chunk_overlap=20)
    return VectorStoreIndex.from_documents(docs, embed_model=HashEmbedding(), transformations=[splitter])


@st.composite
def cases(draw: st.DrawFn) -> dict:
    window = int(math.exp(draw(st.floats(math.log(2048), math.log(16_384)))))
    return {
        "window": window,
        "num_output": draw(st.integers(16, window // 8)),
        # retrieved material from a third of the window to six windows (a chunk is ~400 tokens)
        "top_k": max(1, min(60, round(window * draw(st.sampled_from([0.3, 0.8, 1.5, 3.0, 6.0])) / 400))),
        "question": draw(st.sampled_from(QUESTIONS)),
        "turns": draw(st.integers(0, 3)),
        "turn_tokens": draw(st.integers(5, window // 32)),
        "seed": draw(st.integers(0, 1000)),
    }


def _history(case: dict) -> list[ChatMessage]:
    out = []
    for t in range(case["turns"]):
        out += [
            ChatMessage(role="user", content=text_of_tokens(case["turn_tokens"], seed=case["seed"] + t)),
            ChatMessage(role="assistant", content=text_of_tokens(case["turn_tokens"], seed=case["seed"] + 50 + t)),
        ]
    return out


def _run(case: dict, llm: BudgetedLLM, post: ContextBudgetPostprocessor | None) -> list:
    retriever = index().as_retriever(similarity_top_k=case["top_k"])
    posts = [post] if post is not None else []
    question = case["question"]
    if case["engine"] == "chat":
        # LlamaIndex's default memory keeps an aiosqlite connection open per engine; the buffer holds the same turns.
        memory = ChatMemoryBuffer.from_defaults(chat_history=_history(case), token_limit=case["window"] - 256)
        chat = CondensePlusContextChatEngine.from_defaults(retriever, llm=llm, memory=memory, node_postprocessors=posts)
        return chat.chat(question).source_nodes
    if case["engine"] == "stuffed":
        helper = PromptHelper(context_window=4 * case["window"], num_output=case["num_output"])
        synth = get_response_synthesizer(llm=llm, response_mode="compact", prompt_helper=helper)
        engine = RetrieverQueryEngine(retriever, response_synthesizer=synth, node_postprocessors=posts)
    else:
        engine = RetrieverQueryEngine.from_args(
            retriever, llm=llm, response_mode=case["engine"], node_postprocessors=posts
        )
    return engine.query(question).source_nodes


def _postprocessor(case: dict, llm: BudgetedLLM) -> ContextBudgetPostprocessor | None:
    if not case["post"]:
        return None
    if case["engine"] != "chat":
        return ContextBudgetPostprocessor(llm)
    # The chat engine puts the context in its own system prompt, after the history: both are the fixed part.
    history = sum(ACC.count_message(m) for m in _history(case))
    template = PromptTemplate(DEFAULT_CONTEXT_PROMPT_TEMPLATE)
    return ContextBudgetPostprocessor(llm, prompt_templates=[template], reserve_tokens=history)


settings.register_profile(
    "stock-ci", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.register_profile("stock-thorough", settings.get_profile("stock-ci"), max_examples=300)
PROFILE = settings.get_profile("stock-thorough" if os.environ.get("HYPOTHESIS_PROFILE") == "thorough" else "stock-ci")


@pytest.mark.parametrize("post", [False, True], ids=["budgeted_llm", "with_postprocessor"])
@pytest.mark.parametrize("engine", ENGINES)
@PROFILE
@given(cases())
def test_no_prompt_of_a_stock_engine_passes_the_window(engine: str, post: bool, case: dict) -> None:
    case = {**case, "engine": engine, "post": post}
    inner = ScriptedLLM([case["question"]], cycle=True)  # condensing returns the question; answers are short
    inner.context_window, inner.num_output = case["window"], case["num_output"]
    llm = BudgetedLLM(inner, ContextBudget())
    budget = _postprocessor(case, llm)

    sources = _run(case, llm, budget)

    assert inner.calls and len(inner.calls) == len(llm.reports)
    for call, report in zip(inner.calls, llm.reports, strict=True):
        sent = ACC.count_prompt(call.messages)
        assert sent == report.tokens_after and sent + case["num_output"] <= case["window"]
        for step in report.path:
            event(step)
    event(f"{min(len(inner.calls), 5)}+ calls")
    if budget is not None and engine == "compact" and sources:
        assert len(inner.calls) == 1  # every article kept fits one prompt
        top = sources[0].node.get_content().strip()[:200]
        assert top in "".join(text_of(m) for m in inner.calls[0].messages)
