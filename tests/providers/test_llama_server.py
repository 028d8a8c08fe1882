"""ragidx's chat format for llama-cpp-python's server: chatml-function-calling, with logit_bias on every call."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from llama_cpp import llama_chat_format

from ragidx.providers.llama_server import CHAT_FORMAT, chat_handler, register


class _Recorder:
    """What a llama-cpp-python chat handler asks of its ``Llama``: a completion of the rendered prompt."""

    verbose = False

    def __init__(self) -> None:
        self.options: dict[str, Any] = {}

    def create_completion(self, **options: Any) -> dict[str, Any]:
        self.options = options
        return {
            "id": "c",
            "object": "text_completion",
            "created": 0,
            "model": "m",
            "choices": [{"text": "ok", "index": 0, "logprobs": None, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }


def test_a_call_without_tools_gets_its_logit_bias_and_the_librarys_own_prompt() -> None:
    llama = _Recorder()
    messages = [
        {"role": "system", "content": "Articles are quoted data."},
        {"role": "user", "content": "Question: what?"},
    ]
    reply = chat_handler(llama, messages, logit_bias={"3": 5.0, "7": -2.0}, max_tokens=1)
    assert llama.options["prompt"] == (
        "<|im_start|>system\nArticles are quoted data.<|im_end|>\n"
        "<|im_start|>user\nQuestion: what?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    [bias] = llama.options["logits_processor"]  # chatml-function-calling alone dropped the bias
    scores = bias(np.zeros(3, dtype=np.intc), np.zeros(10, dtype=np.single))
    assert scores[3] == 5.0 and scores[7] == -2.0 and scores.sum() == 3.0
    assert llama.options["max_tokens"] == 1 and reply["choices"][0]["message"]["content"] == "ok"


def test_calls_with_tools_go_to_chatml_function_calling_unchanged(monkeypatch: Any) -> None:
    seen: dict[str, Any] = {}

    def function_calling(llama: Any, messages: Any, **kwargs: Any) -> str:
        seen.update(kwargs)
        return "routed"

    monkeypatch.setattr(llama_chat_format, "chatml_function_calling", function_calling)
    tool = {"type": "function", "function": {"name": "plan", "parameters": {"type": "object"}}}
    choice = {"type": "function", "function": {"name": "plan"}}
    assert chat_handler(_Recorder(), [], tools=[tool], tool_choice=choice, temperature=0.0) == "routed"
    assert seen["tools"] == [tool] and seen["tool_choice"] == choice and seen["temperature"] == 0.0
    assert "logits_processor" not in seen


def test_register_makes_the_format_known_to_llama_cpp() -> None:
    register()
    register()  # idempotent
    assert llama_chat_format.get_chat_completion_handler(CHAT_FORMAT) is chat_handler


class _Stepper(_Recorder):
    """A ``Llama`` whose completion runs the logits processors over one step of a four-token vocabulary."""

    vocab = ("YES", "NO", "Yes", "x")

    def create_completion(self, **options: Any) -> dict[str, Any]:
        reply = super().create_completion(**options)
        scores = np.log(np.array([0.2, 0.7, 0.05, 0.05], dtype=np.single))
        for process in options["logits_processor"]:
            scores = process(np.zeros(3, dtype=np.intc), scores)
        reply["choices"][0]["text"] = self.vocab[int(np.argmax(scores))]
        return reply

    def tokenize(self, text: bytes, add_bos: bool = False, special: bool = False) -> list[int]:
        return [self.vocab.index(text.decode())]

    def detokenize(self, tokens: list[int]) -> bytes:
        return "".join(self.vocab[t] for t in tokens).encode()


def test_logprobs_are_the_models_own_before_the_bias_without_logits_all() -> None:
    llama = _Stepper()
    reply = chat_handler(
        llama,
        [{"role": "user", "content": "Answer YES or NO."}],
        logit_bias={"0": 100.0, "1": 98.0},  # YES lifted 2 more: the bias decides the reply
        logprobs=True,
        top_logprobs=3,
        max_tokens=1,
    )
    choice = reply["choices"][0]
    assert choice["message"]["content"] == "YES"
    assert "logprobs" not in llama.options or llama.options["logprobs"] is None  # the library's would need logits_all
    [token] = choice["logprobs"]["content"]
    assert token["token"] == "YES" and token["logprob"] == pytest.approx(np.log(0.2), abs=1e-5)
    assert [t["token"] for t in token["top_logprobs"]] == ["NO", "YES", "Yes"]
    assert token["top_logprobs"][0]["logprob"] == pytest.approx(np.log(0.7), abs=1e-5)


def test_without_logprobs_asked_the_reply_has_none() -> None:
    reply = chat_handler(_Stepper(), [{"role": "user", "content": "?"}], logit_bias={"0": 1.0}, max_tokens=1)
    assert reply["choices"][0]["logprobs"] is None
