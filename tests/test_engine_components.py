"""``Engine(settings, llm=..., embed_model=..., reranker=...)``: LlamaIndex objects a user already has, used by the
real engine (stores, retrieval, agent, budget) in place of the configured ones."""

from __future__ import annotations

from pathlib import Path

from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle
from pydantic import PrivateAttr

from ragidx.config import LLMEndpoint, Settings
from ragidx.engine import Engine
from tests.dashboard.fakes import cite_sources
from tests.fakes.hash_embedding import HashEmbedding
from tests.fakes.scripted_llm import ScriptedLLM


class Reversing(BaseNodePostprocessor):
    """A user's chunk reranker: the searched chunks in reverse order, each call counted."""

    _calls: list[int] = PrivateAttr(default_factory=list)

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        self._calls.append(len(nodes))
        return [NodeWithScore(node=n.node, score=float(i)) for i, n in enumerate(nodes)]


def test_an_engine_answers_with_the_llm_embedding_and_reranker_it_was_given(
    tmp_path: Path, writer_kb_file: str
) -> None:
    llm = ScriptedLLM([cite_sources], cycle=True)
    llm.context_window = 8192
    reranker = Reversing()
    embed = HashEmbedding(dim=256, reads=frozenset({"en"}))
    with Engine(Settings(data_dir=tmp_path), llm=llm, embed_model=embed, reranker=reranker) as engine:
        assert engine.ingest(writer_kb_file).new == 26
        assert engine.embed_model is embed and engine.retriever.reranker is reranker
        # the LLM's own window; the endpoint profile (the small-model rules are for the bundled local model)
        assert engine.settings.llm.context_window == 8192 and engine.guards.profile == "endpoint"
        answer = engine.ask("How do I create a table of contents?")
    assert reranker._calls and not answer.not_found and answer.citations
    assert answer.guard_profile["profile"] == "endpoint" and llm.calls  # the given LLM wrote it


def test_settings_that_name_the_window_or_the_profile_win_over_the_llms_metadata(tmp_path: Path) -> None:
    llm = ScriptedLLM(["x"])
    llm.context_window = 8192
    settings = Settings(data_dir=tmp_path, llm=LLMEndpoint(context_window=4096, guards="small-model"))
    engine = Engine(settings, llm=llm)
    assert engine.settings.llm.context_window == 4096 and engine.guards.profile == "small-model"
    assert engine.settings is not settings and settings.llm.guards == "small-model"  # the caller's stays as given


def test_every_public_method_of_engine_says_what_it_returns() -> None:
    import inspect
    import re

    untyped = []
    for name, member in inspect.getmembers(Engine):
        if name.startswith("_"):
            continue
        function = member.fget if isinstance(member, property) else member
        if not callable(function) or not hasattr(function, "__annotations__"):
            continue
        returns = str(inspect.signature(function).return_annotation)
        if returns == str(inspect.Signature.empty) or re.search(r"\bAny\b", returns.replace("dict[str, Any]", "")):
            untyped.append(f"{name} -> {returns}")
    assert untyped == []
