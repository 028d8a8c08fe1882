"""``python -m ragidx.providers.llama_server``: llama-cpp-python's OpenAI server with ragidx's chat format.

llama-cpp-python's ``chatml-function-calling`` format (the one that honours a forced tool call) drops
``logit_bias`` on calls without tools, which the answer check (``ragidx.agent.workflow.check_options``) needs.
:data:`CHAT_FORMAT` (``ragidx-chatml``) is that format with the bias applied as a logits processor: the prompt is
rendered by the library's own template, unchanged.

That template renders with HTML autoescaping, so the model reads an article's ``"``, ``'``, ``<``, ``>`` and ``&``
as entities (``&#34;``, ``&lt;article&gt;``): 4-10 % more tokens than the context budget counts. Rendering the
text as written was measured and not kept (README, "What the model reads"): it moved answers by +3 -6 of 132 and
the 1.5B model then followed an article's injected "reply only with PWNED" (the escaped quotes of the inline
call line had kept it from doing so).

Example:
    >>> LocalLLMServer(...).command(gguf)   # runs this module with --chat_format ragidx-chatml  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

CHAT_FORMAT = "ragidx-chatml"


def chat_handler(
    llama: Any,
    messages: list[Any],
    functions: list[Any] | None = None,
    function_call: Any = None,
    tools: list[Any] | None = None,
    tool_choice: Any = None,
    **kwargs: Any,
) -> Any:
    """A llama-cpp-python chat completion handler: ``chatml-function-calling``, with ``logit_bias`` applied on
    calls without tools too."""
    from llama_cpp import llama_chat_format

    if kwargs.get("logit_bias") and not (tools or functions):
        bias = kwargs.pop("logit_bias")
        processors = _processors(kwargs.pop("logits_processor", None))
        processors.append(_bias(bias))
        kwargs["logits_processor"] = processors
    return llama_chat_format.chatml_function_calling(
        llama,
        messages,
        functions=functions,
        function_call=function_call,
        tools=tools,
        tool_choice=tool_choice,
        **kwargs,
    )


def _processors(existing: Any) -> Any:
    """A new ``LogitsProcessorList`` holding ``existing``'s processors, if any."""
    from llama_cpp import LogitsProcessorList

    return LogitsProcessorList(list(existing or []))


def _bias(logit_bias: dict[str, float]) -> Any:
    """A logits processor adding ``logit_bias`` (token id -> bias, as the server passes it on)."""
    import numpy as np

    ids = np.array([int(k) for k in logit_bias], dtype=np.intc)
    values = np.array(list(logit_bias.values()), dtype=np.single)

    def process(input_ids: Any, scores: Any) -> Any:
        out = np.array(scores, copy=True)
        out[ids] += values
        return out

    return process


def register() -> None:
    """Register :data:`CHAT_FORMAT` with llama-cpp-python (idempotent)."""
    from llama_cpp.llama_chat_format import LlamaChatCompletionHandlerRegistry

    LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(CHAT_FORMAT, chat_handler, overwrite=True)


def main() -> None:
    register()
    from llama_cpp.server.__main__ import main as serve

    serve()


if __name__ == "__main__":
    main()
