"""Settings → Engine → context budget: the memory summary setting reaches ConversationMemory."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole

from ragidx.config import Settings
from tests.dashboard.fakes import make_engine
from tests.fakes.scripted_llm import ScriptedLLM


def test_memory_summary_is_extractive_by_default(tmp_path: Path) -> None:
    engine = make_engine(Settings(data_dir=tmp_path))
    assert Settings().memory_summary == "extractive"
    assert engine.agent().budget.memory.llm is None
    assert engine.budgeted_llm(ScriptedLLM([])).budget_memory_llm is None


def test_memory_summary_llm_has_the_answering_model_write_the_summary(tmp_path: Path) -> None:
    engine = make_engine(Settings(data_dir=tmp_path, memory_summary="llm"))
    agent = engine.agent()
    assert agent.budget.memory.llm is agent.llm  # the engine's model writes it

    inner = ScriptedLLM(["The user set up a footnote; the answer cited Footnotes [1]."])
    llm = engine.budgeted_llm(inner)
    assert llm.budget_memory_llm is inner  # on your own agent: your model
    history = [ChatMessage(role=MessageRole.USER, content=f"question {i} about footnotes") for i in range(6)]
    result = llm.budget_memory.summarize(history, question="and endnotes?")
    assert result.method == "llm" and "Footnotes [1]" in (result.messages[0].content or "")


def test_a_bad_memory_summary_value_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="memory_summary"):
        Settings(data_dir=tmp_path, memory_summary="abstractive")  # type: ignore[arg-type]
