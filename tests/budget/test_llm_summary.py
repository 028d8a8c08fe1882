from __future__ import annotations

import asyncio
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, ChatResponse

from ragidx.article import Article
from ragidx.budget.llm_summary import LLMSummaryCompressor
from tests.budget.helpers import text_of_tokens
from tests.fakes.scripted_llm import ScriptedLLM, text_of

ART = Article("kb1", "Printer setup", "https://kb/1", text_of_tokens(800, 1))


def test_prompt_carries_question_target_title_and_url() -> None:
    llm = ScriptedLLM(["Install the driver, then reboot."])
    out = LLMSummaryCompressor(llm).compress(ART, 100, "How to set up the printer?")
    assert out == "Install the driver, then reboot."
    prompt = text_of(llm.calls[0].messages[0])
    for piece in (
        "How to set up the printer?",
        "at most 100 tokens",
        "Printer setup",
        "https://kb/1",
        "numbers",
    ):
        assert piece in prompt


def test_fences_are_stripped() -> None:
    comp = LLMSummaryCompressor(ScriptedLLM(["```markdown\nShort summary.\n```"]))
    assert comp.compress(ART, 100, "q") == "Short summary."


def test_errors_and_empty_replies_fall_back_to_extractive() -> None:
    comp = LLMSummaryCompressor(ScriptedLLM([RuntimeError("endpoint down"), "   "]))
    first = comp.compress(ART, 120, "q")
    second = comp.compress(ART, 120, "q")
    assert first and second
    assert first.split(". ")[0] in ART.content and second.split(". ")[0] in ART.content
    assert comp.tokens.count(first) <= 120 and comp.tokens.count(second) <= 120
    assert comp.stats["llm_error"] == 1 and comp.stats["empty_reply"] == 1


def test_overshoot_small_is_truncated_large_falls_back() -> None:
    slightly = text_of_tokens(110, 2)
    far = text_of_tokens(400, 3)
    comp = LLMSummaryCompressor(ScriptedLLM([slightly, far]))
    a = comp.compress(ART, 100, "q")
    b = comp.compress(ART, 100, "q")
    assert slightly.startswith(a) and comp.tokens.count(a) <= 100
    assert not far.startswith(b) and comp.tokens.count(b) <= 100
    assert comp.stats["overshoot_truncated"] == 1 and comp.stats["overshoot"] == 1


def test_short_article_skips_the_llm() -> None:
    llm = ScriptedLLM([])
    short = Article("k", "T", "", "Already short.")
    assert LLMSummaryCompressor(llm).compress(short, 100, "q") == "Already short."
    assert llm.calls == []


class SlowLLM:
    """Async fake that records how many calls run at once."""

    def __init__(self) -> None:
        self.active = 0
        self.peak = 0

    async def achat(self, messages: list[ChatMessage], **kwargs: Any) -> ChatResponse:
        self.active += 1
        self.peak = max(self.peak, self.active)
        await asyncio.sleep(0.01)
        self.active -= 1
        return ChatResponse(message=ChatMessage(role="assistant", content="summary"))


def test_many_summaries_run_concurrently_within_limit() -> None:
    llm = SlowLLM()
    comp = LLMSummaryCompressor(llm, max_concurrency=3)
    arts = [Article(f"k{i}", "T", "", text_of_tokens(300, i)) for i in range(8)]
    out = asyncio.run(comp.acompress_many(arts, [50] * 8, "q"))
    assert out == ["summary"] * 8
    assert llm.peak == 3


def test_sync_compress_many_runs_concurrently() -> None:
    llm = SlowLLM()
    comp = LLMSummaryCompressor(llm, max_concurrency=3)
    arts = [Article(f"k{i}", "T", "", text_of_tokens(300, i)) for i in range(3)]
    assert comp.compress_many(arts, [50] * 3, "q") == ["summary"] * 3
    assert llm.peak == 3 and comp.stats["ok"] == 3
