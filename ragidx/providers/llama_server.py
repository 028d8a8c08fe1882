"""``python -m ragidx.providers.llama_server``: llama-cpp-python's OpenAI server with ragidx's chat format.

llama-cpp-python's ``chatml-function-calling`` format (the one that honours a forced tool call) drops
``logit_bias`` on calls without tools, which the answer check (``ragidx.agent.workflow.check_options``) needs,
and it gives ``logprobs`` only for a model loaded with ``logits_all`` (gigabytes of logits at an 8K context).
:data:`CHAT_FORMAT` (``ragidx-chatml``) is that format with the bias applied as a logits processor, and with
``logprobs`` / ``top_logprobs`` answered from the sampler's own logits (the model's, before the bias): how the
check reports its log-odds (``Answer.answer_check``). The prompt is rendered by the library's own template,
unchanged.

That template renders with HTML autoescaping, so the model reads an article's ``"``, ``'``, ``<``, ``>`` and ``&``
as entities (``&#34;``, ``&lt;article&gt;``): 4-10 % more tokens than the context budget counts. Rendering the
text as written was measured and not kept (CHANGELOG.md, 2026-11-27, "What the model reads"): it moved answers
by +3 -6 of 132 and the 1.5B model then followed an article's injected "reply only with PWNED" (the escaped
quotes of the inline call line had kept it from doing so).

Example:
    >>> LocalLLMServer(...).command(gguf)   # runs this module with --chat_format ragidx-chatml  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from ragidx.providers.split_decode import Layout

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
    """A llama-cpp-python chat completion handler: ``chatml-function-calling``, with ``logit_bias`` applied and
    ``logprobs`` reported on calls without tools too (not streamed ones: the check's call is not)."""
    from llama_cpp import llama_chat_format

    recorder: _LogprobRecorder | None = None
    if not (tools or functions):
        processors = _processors(kwargs.pop("logits_processor", None))
        wanted = kwargs.pop("logprobs", None)
        top = kwargs.pop("top_logprobs", None)
        if wanted and not kwargs.get("stream"):
            recorder = _LogprobRecorder(max(1, min(int(top or 1), MAX_TOP_LOGPROBS)))
            processors.append(recorder)  # before the bias: the model's own log-probabilities
        if kwargs.get("logit_bias"):
            processors.append(_bias(kwargs.pop("logit_bias")))
        kwargs["logits_processor"] = processors or None
    response = llama_chat_format.chatml_function_calling(
        llama,
        messages,
        functions=functions,
        function_call=function_call,
        tools=tools,
        tool_choice=tool_choice,
        **kwargs,
    )
    if recorder is not None:
        choice = response["choices"][0]
        choice["logprobs"] = recorder.chat_logprobs(llama, choice["message"].get("content") or "")
    return response


MAX_TOP_LOGPROBS = 20
"""OpenAI's limit for ``top_logprobs``."""


class _LogprobRecorder:
    """A logits processor that changes nothing and keeps each step's ``top`` log-probabilities: the server
    gives ``logprobs`` only for models loaded with ``logits_all`` (a vocabulary of logits per prompt token,
    gigabytes at 8K context), while the sampler's own logits per generated token are all a reply needs."""

    def __init__(self, top: int) -> None:
        self.top = top
        self.steps: list[tuple[list[int], list[float]]] = []

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import numpy as np

        logits = np.asarray(scores, dtype=np.float64)
        logprobs = logits - np.logaddexp.reduce(logits)
        best = np.argsort(-logprobs)[: self.top]
        self.steps.append(([int(i) for i in best], [float(logprobs[i]) for i in best]))
        return scores

    def chat_logprobs(self, llama: Any, text: str) -> dict[str, Any]:
        """OpenAI's chat ``logprobs`` object: per token of ``text``, its top alternatives (a step whose token is
        not among them reports the last one's log-probability as an upper bound)."""
        tokens = llama.tokenize(text.encode("utf-8"), add_bos=False, special=True) if text else []
        content = []
        for token, (ids, values) in zip(tokens, self.steps, strict=False):
            top = [_entry(llama, i, v) for i, v in zip(ids, values, strict=True)]
            chosen = next((t for i, t in zip(ids, top, strict=True) if i == token), None)
            content.append({**(chosen or _entry(llama, token, values[-1])), "top_logprobs": top})
        return {"content": content, "refusal": None}


def _entry(llama: Any, token: int, logprob: float) -> dict[str, Any]:
    piece = llama.detokenize([token])
    return {"token": piece.decode("utf-8", errors="replace"), "logprob": logprob, "bytes": list(piece)}


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


PROMPT_LOOKUP_FLAG = "--ragidx_prompt_lookup"
"""This module's own flag (taken off the command line before llama-cpp-python's parser reads it): tokens proposed
per step by prompt-lookup decoding (:mod:`ragidx.providers.prompt_lookup`); absent or 0: off."""


def _pop_flag(argv: list[str], flag: str) -> tuple[list[str], str | None]:
    """``argv`` without ``flag`` and the word after it, and that word ("" when the flag ends the line; None when
    the flag is absent)."""
    if flag not in argv:
        return list(argv), None
    at = argv.index(flag)
    return argv[:at] + argv[at + 2 :], argv[at + 1] if at + 1 < len(argv) else ""


def pop_prompt_lookup(argv: list[str]) -> tuple[list[str], int]:
    """``argv`` without :data:`PROMPT_LOOKUP_FLAG` and its value, and that value (0 when absent)."""
    rest, value = _pop_flag(argv, PROMPT_LOOKUP_FLAG)
    if value is None:
        return rest, 0
    try:
        return rest, int(value)
    except ValueError:
        raise SystemExit(f"{PROMPT_LOOKUP_FLAG} needs a whole number of tokens (0: off)") from None


def _with_prompt_lookup(tokens: int) -> None:
    """Make llama-cpp-python's server load its model with a prompt-lookup draft of ``tokens`` per step."""
    from llama_cpp.server.model import LlamaProxy

    from ragidx.providers.prompt_lookup import PromptLookupDraft, attach

    load = LlamaProxy.load_llama_from_model_settings

    def load_with_draft(settings: Any) -> Any:
        return attach(load(settings), PromptLookupDraft(tokens))

    LlamaProxy.load_llama_from_model_settings = staticmethod(load_with_draft)  # type: ignore[method-assign]


LAYOUTS_FLAG = "--ragidx_layouts"
"""This module's own flag: the weight layouts that read prompts and write answers, ``READ,WRITE`` (each ``plain`` or
``repacked``, :mod:`ragidx.providers.split_decode`); two different ones load the model twice and split the work.
Absent: llama.cpp's default layout for both, one model."""


def pop_layouts(argv: list[str]) -> tuple[list[str], tuple[Layout, Layout] | None]:
    """``argv`` without :data:`LAYOUTS_FLAG` and its value, and that value (None when absent)."""
    from ragidx.providers.split_decode import LAYOUTS

    rest, value = _pop_flag(argv, LAYOUTS_FLAG)
    if value is None:
        return rest, None
    names = value.split(",")
    if len(names) != 2 or any(n not in LAYOUTS for n in names):
        raise SystemExit(f"{LAYOUTS_FLAG} needs READ,WRITE, each one of {', '.join(LAYOUTS)}")
    read, write = (cast("Layout", n) for n in names)
    return rest, (read, write)


def _with_layouts(read: Layout, write: Layout) -> None:
    """Make llama-cpp-python's server load its model in the ``read`` layout and, when ``write`` differs, a second
    copy in the ``write`` layout that writes the answers (:func:`ragidx.providers.split_decode.split`)."""
    from llama_cpp.server.model import LlamaProxy

    from ragidx.providers.split_decode import layout, split

    load = LlamaProxy.load_llama_from_model_settings

    def load_in_layouts(settings: Any) -> Any:
        with layout(read):
            reader = load(settings)
        if write != read:
            with layout(write):
                writer = load(settings)
            split(reader, writer)
        return reader

    LlamaProxy.load_llama_from_model_settings = staticmethod(load_in_layouts)  # type: ignore[method-assign]


def main() -> None:
    import sys

    register()
    sys.argv, lookup = pop_prompt_lookup(sys.argv)
    sys.argv, layouts = pop_layouts(sys.argv)
    if layouts is not None:  # first: a prompt-lookup draft attaches to the model it returns
        _with_layouts(*layouts)
    if lookup > 0:
        _with_prompt_lookup(lookup)
    from llama_cpp.server.__main__ import main as serve

    serve()


if __name__ == "__main__":
    main()
