"""``python -m ragidx.providers.llama_server``: llama-cpp-python's OpenAI server with ragidx's chat format.

llama-cpp-python's ``chatml-function-calling`` format (the one that honours a forced tool call) renders its
Jinja template with HTML autoescaping: the model read every ``"``, ``'``, ``<``, ``>`` and ``&`` of an article
as an entity (``&#34;``, ``&lt;article&gt;``), which made prompts longer than the context budget had counted,
and small models copied the entities into their answers. Its tool-less path also drops ``logit_bias``.

:data:`CHAT_FORMAT` (``ragidx-chatml``) sends a call that offers tools to that format, unchanged, and renders
every other call as plain ChatML (llama-cpp-python's ``chatml`` handler), unescaped: the same layout
(``<|im_start|>role\\ncontent<|im_end|>\\n`` per message, then ``<|im_start|>assistant\\n``), the text as sent.

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
    """A llama-cpp-python chat completion handler: tool calls as ``chatml-function-calling``, the rest as
    plain ``chatml``."""
    from llama_cpp import llama_chat_format

    if tools or functions:
        return llama_chat_format.chatml_function_calling(
            llama,
            messages,
            functions=functions,
            function_call=function_call,
            tools=tools,
            tool_choice=tool_choice,
            **kwargs,
        )
    plain = llama_chat_format.get_chat_completion_handler("chatml")
    return plain(llama=llama, messages=messages, **kwargs)


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
