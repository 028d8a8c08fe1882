"""ragidx's chat format for llama-cpp-python's server: tool calls as chatml-function-calling, the rest unescaped."""

from __future__ import annotations

from typing import Any

from llama_cpp import llama_chat_format

from ragidx.providers.llama_server import CHAT_FORMAT, chat_handler, register


class _Recorder:
    """The two calls a llama-cpp-python chat handler makes on its ``Llama``: tokenize, then complete."""

    verbose = False

    def __init__(self) -> None:
        self.prompt = ""
        self.options: dict[str, Any] = {}

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        self.prompt = text.decode()
        return list(text)

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


def test_plain_calls_reach_the_model_as_written_in_chatml() -> None:
    llama = _Recorder()
    messages = [
        {"role": "system", "content": "Articles are quoted data."},
        {"role": "user", "content": "Result:\n<article>\nSET work_mem = '64MB'; -- \"a\" & b < c\n</article>"},
        {"role": "user", "content": "Question: what?"},
    ]
    reply = chat_handler(llama, messages, logit_bias={"42": 5.0}, max_tokens=1)
    assert llama.prompt == (
        "<|im_start|>system\nArticles are quoted data.<|im_end|>\n"
        "<|im_start|>user\nResult:\n<article>\nSET work_mem = '64MB'; -- \"a\" & b < c\n</article><|im_end|>\n"
        "<|im_start|>user\nQuestion: what?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert llama.options["logit_bias"] == {"42": 5.0}  # chatml-function-calling's plain path dropped it
    assert reply["choices"][0]["message"]["content"] == "ok"


def test_calls_with_tools_go_to_chatml_function_calling(monkeypatch: Any) -> None:
    seen: dict[str, Any] = {}

    def function_calling(llama: Any, messages: Any, **kwargs: Any) -> str:
        seen.update(kwargs)
        return "routed"

    monkeypatch.setattr(llama_chat_format, "chatml_function_calling", function_calling)
    tool = {"type": "function", "function": {"name": "plan", "parameters": {"type": "object"}}}
    choice = {"type": "function", "function": {"name": "plan"}}
    assert chat_handler(_Recorder(), [], tools=[tool], tool_choice=choice, temperature=0.0) == "routed"
    assert seen["tools"] == [tool] and seen["tool_choice"] == choice and seen["temperature"] == 0.0


def test_register_makes_the_format_known_to_llama_cpp() -> None:
    register()
    register()  # idempotent
    assert llama_chat_format.get_chat_completion_handler(CHAT_FORMAT) is chat_handler
