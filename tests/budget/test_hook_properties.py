"""Property: whatever the window, conversation, articles and compressor, the prompt fits the window.

``ContextWindowTooSmallError`` is raised exactly when the fixed part (system prompt + tool schemas +
current question + reserved output + margin) cannot fit.
"""

from __future__ import annotations

import math
import os
import random

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock

from ragidx.article import Article
from ragidx.budget import (
    ContextBudget,
    ContextWindowTooSmallError,
    ExtractiveCompressor,
    PromptAccountant,
    TruncateCompressor,
)
from tests.budget.helpers import (
    article,
    assistant,
    fit,
    retrieve_tool_spec,
    system_message,
    tool_call,
    tool_result,
    user,
)

ACC = PromptAccountant()
_WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "printer",
    "driver",
    "table",
    "index",
    "export",
    "backup",
    "server",
    "user",
]
_RU_WORDS = ["таблица", "принтер", "драйвер", "резервная", "копия", "сервер", "индекс", "обновление"]
MODES = ["extractive", "truncate", "whole", "longer", "empty", "raise", "none", "escapes"]


def cheap_text(n_words: int, seed: int) -> str:
    rng = random.Random(seed)
    words = [rng.choice(_WORDS) for _ in range(n_words)]
    return ". ".join(" ".join(words[i : i + 9]).capitalize() for i in range(0, len(words), 9))


def cyrillic_text(n_words: int, seed: int) -> str:
    rng = random.Random(seed)
    words = [rng.choice(_RU_WORDS) for _ in range(n_words)]
    return ".\n".join(" ".join(words[i : i + 7]).capitalize() for i in range(0, len(words), 7))


class Misbehaving:
    """Ignores the target in the way ``mode`` says."""

    name = "misbehaving"

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def compress(self, art: Article, target_tokens: int, question: str) -> str:
        if self.mode == "raise":
            raise RuntimeError("compressor crashed")
        if self.mode == "none":
            return None  # type: ignore[return-value]
        if self.mode == "escapes":  # within the target as text, far over it once JSON-escaped
            return ('"\\\n' * max(1, target_tokens))[: 3 * max(1, target_tokens)]
        return {"whole": art.content, "longer": art.content + " " + art.content, "empty": ""}[self.mode]

    async def acompress(self, art: Article, target_tokens: int, question: str) -> str:
        return self.compress(art, target_tokens, question)


def compressor(mode: str) -> object:
    if mode == "extractive":
        return ExtractiveCompressor(ACC.tokens)
    if mode == "truncate":
        return TruncateCompressor(ACC.tokens)
    return Misbehaving(mode)


@st.composite
def cases(draw: st.DrawFn) -> dict:
    window = int(math.exp(draw(st.floats(math.log(2048), math.log(200_000)))))
    material = min(
        int(window * draw(st.sampled_from([0.3, 0.8, 1.2, 2.0, 3.0]))), 60_000
    )  # words of articles + history
    seed = draw(st.integers(0, 10_000))
    text = cyrillic_text if draw(st.integers(0, 4)) == 0 else cheap_text
    n_history = draw(st.integers(0, 5))
    n_calls = draw(st.integers(0, 3))
    per_call = [draw(st.integers(0, 5)) for _ in range(n_calls)]
    n_articles = sum(per_call) or 1
    messages: list[ChatMessage] = []
    history_share = draw(st.floats(0.0, 0.6))
    for t in range(n_history):
        words = int(material * history_share / max(1, n_history) / 2)
        messages += [user(cheap_text(words, seed + t)), assistant(cheap_text(words, seed + 100 + t))]
        if draw(st.booleans()):
            cid = f"h{t}"
            messages += [
                tool_call(cid),
                tool_result(cid, [article(f"old{t}", 0.5, cheap_text(words, seed + 200 + t))]),
            ]
    messages.append(user("How do I restore the backup of the index? " + cheap_text(draw(st.integers(0, 300)), seed)))
    kb_pool = [f"kb{i}" for i in range(max(1, n_articles - draw(st.integers(0, 2))))]  # some repeats
    rng = random.Random(seed)
    for c, k in enumerate(per_call):
        cid = f"c{c}"
        arts = []
        for _ in range(k):
            kb = rng.choice(kb_pool)
            words = int(material * (1 - history_share) / n_articles * rng.uniform(0.2, 1.8))
            arts.append(article(kb, rng.random(), text(words, int(kb[2:]))))
        messages += [tool_call(cid), tool_result(cid, arts)]
    return {
        "window": window,
        "messages": messages,
        "system": cheap_text(draw(st.integers(0, 3000)), seed + 7),
        "tools": [retrieve_tool_spec()] * draw(st.integers(0, 3)),
        # a large reserved output makes big windows tight without megabytes of text
        "max_output": draw(st.one_of(st.integers(16, 4096), st.integers(16, int(window * 0.9)))),
        "mode": draw(st.sampled_from(MODES)),
        "floor": draw(st.sampled_from([0.0, 0.0, 0.3, 0.5, 0.9])),
    }


def fixed_tokens(case: dict) -> int:
    question = next(m for m in reversed(case["messages"]) if m.role == MessageRole.USER)
    return (
        ACC.reply_priming
        + (ACC.count_message(system_message(case["system"])) if case["system"] else 0)
        + ACC.count_tools(case["tools"])
        + ACC.count_message(question)
    )


# HYPOTHESIS_PROFILE=thorough for a longer search; "ci" keeps the run near half a minute on 2 cores.
settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("thorough", settings.get_profile("ci"), max_examples=2000)
PROFILE = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@PROFILE
@given(cases())
def test_prompt_never_exceeds_window(case: dict) -> None:
    frozen = [m.model_dump() for m in case["messages"]]
    budget = ContextBudget(
        ACC.tokens,
        compressor(case["mode"]),  # type: ignore[arg-type]
        fallback_context_window=400_000,
        relevance_floor=case["floor"],
    )
    window, output = case["window"], case["max_output"]
    hard = window - math.ceil(window * 0.05) - output
    kwargs = dict(system_prompt=case["system"], tools=case["tools"], context_window=window, max_output_tokens=output)
    if fixed_tokens(case) > hard:
        event("too_small")
        with pytest.raises(ContextWindowTooSmallError):
            fit(budget, case["messages"], **kwargs)
        return
    result = fit(budget, case["messages"], **kwargs)
    for step in result.report.path:
        event(step)
    out = result.messages
    total = ACC.count_prompt(out, tools=case["tools"])
    assert total + math.ceil(window * 0.05) + output <= window
    assert total == result.report.tokens_after
    # the current question survives, and every tool result still follows its call
    question = next(m for m in reversed(case["messages"]) if m.role == MessageRole.USER)
    assert any(m is question or m.content == question.content for m in out)
    called = [b.tool_call_id for m in out for b in m.blocks if isinstance(b, ToolCallBlock)]
    answered = [m.additional_kwargs["tool_call_id"] for m in out if m.role == MessageRole.TOOL]
    assert called == answered
    assert [m.model_dump() for m in case["messages"]] == frozen  # inputs never edited
