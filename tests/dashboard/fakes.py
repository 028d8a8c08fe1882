"""Engines for dashboard tests: the real ``Engine`` code path with a scripted LLM.

``make_engine`` uses the deterministic ``HashEmbedding`` (fast, for AppTests); ``make_minilm_engine``
uses the real bundled MiniLM from settings (for the browser test). Both run real LanceDB and article
stores, the real retriever, agent workflow and context budget; only the chat model is scripted: it
chooses "answer" at every ``next_step`` and answers by citing the sources the agent listed, so a
cited answer appears in seconds on a 2-core machine (the packaged Qwen model takes minutes there).

Select one for ``streamlit run`` or ``AppTest`` with
``RAGIDX_DASHBOARD_ENGINE_FACTORY=tests.dashboard.fakes:make_engine``.
"""

from __future__ import annotations

import re
from typing import Any

from llama_index.core.base.llms.types import ChatMessage

from ragidx.config import LLMEndpoint, Settings
from ragidx.engine import Engine
from ragidx.providers.tokenizer import TokenCounter
from tests.fakes.hash_embedding import HashEmbedding
from tests.fakes.scripted_llm import RecordedCall, ScriptedLLM, ToolCall, text_of

_SOURCE = re.compile(r"^\[(\d+)\] (.+)$", re.MULTILINE)


def cite_sources(messages: list[ChatMessage], call: RecordedCall) -> Any:
    """Answer at every decision; the answer cites the first two listed sources by their [n]."""
    if call.tools:
        # A scripted planner: one query per part of the question, split at commas and conjunctions.
        question = next((text_of(m) for m in reversed(messages[:-1]) if m.role == "user"), "")
        parts = [p.strip(" ?.") for p in re.split(r",| and | or ", question) if p.strip(" ?.")]
        return ToolCall("plan_searches", {"queries": parts[1:4]})
    instruction = text_of(messages[-1]) if messages else ""
    _, _, listed = instruction.rpartition("Sources:")
    sources = _SOURCE.findall(listed)
    if not sources:
        return "NOT_FOUND"
    parts = [f"“{title.strip()}” [{n}]" for n, title in sources[:2]]
    return "The knowledge base explains this in " + " and ".join(parts) + "."


class ScriptedProvider:
    """Stands in for ``LLMProvider``: every endpoint gets a scripted LLM with that endpoint's window."""

    def __init__(self) -> None:
        self.endpoints: list[LLMEndpoint] = []
        self.closed = False

    def get(self, endpoint: LLMEndpoint) -> ScriptedLLM:
        self.endpoints.append(endpoint)
        llm = ScriptedLLM([cite_sources], cycle=True)
        llm.context_window = endpoint.context_window
        llm.num_output = endpoint.max_output_tokens
        return llm

    def token_counter(self, endpoint: LLMEndpoint) -> TokenCounter:
        return TokenCounter(endpoint.tokenizer or "cl100k_base")

    def answer_check(self, endpoint: LLMEndpoint) -> None:
        return None  # a scripted model has no YES/NO logits to weigh; its script is the answer

    def answer_deadline(self, endpoint: LLMEndpoint, llm: Any, tokens: TokenCounter) -> None:
        return None  # a scripted model has no speed worth a time cap (and must not be logged as one)

    def close(self) -> None:
        self.closed = True


def make_engine(settings: Settings) -> Engine:
    """Real stores and agent, hash embeddings (English-only, as the default MiniLM says), scripted LLM."""
    embed = HashEmbedding(dim=256, reads=frozenset({"en"}))
    return Engine(settings, embed_model=embed, llm_provider=ScriptedProvider())  # type: ignore[arg-type]


def make_minilm_engine(settings: Settings) -> Engine:
    """Real stores, agent and MiniLM embeddings; scripted LLM."""
    return Engine(settings, llm_provider=ScriptedProvider())  # type: ignore[arg-type]


def make_endpoint_engine(settings: Settings) -> Engine:
    """Real stores and agent, hash embeddings, and the real OpenAI-protocol client of the configured endpoint
    (``RAGIDX_LLM__API_BASE``): for what the page shows when that endpoint fails."""
    embed = HashEmbedding(dim=256, reads=frozenset({"en"}))
    return Engine(settings, embed_model=embed)
