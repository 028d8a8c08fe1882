"""An LLM the caller built, as the engine's model factory: ``Engine(settings, llm=my_llm)``.

The engine asks its provider for a model per endpoint (the answer model, the fallback, the flash reranker's);
with a given LLM every one of them is that LLM. What the engine would otherwise learn from the ``[llm]``
endpoint comes from the LLM itself (:func:`settings_for`): its context window and answer length from its
metadata, unless ``[llm]`` sets them; the ``endpoint`` guard profile unless ``[llm] guards`` names one (the
``small-model`` rules are for the bundled local model). There is no answer check (it reads the endpoint's
token log-probabilities) and no answer-time cap (its speed is unknown).

Example:
    >>> from llama_index.core.llms import MockLLM
    >>> from ragidx.config import Settings
    >>> s = settings_for(Settings(data_dir="/tmp/kb"), MockLLM(max_tokens=256))
    >>> s.llm.effective_guards, s.llm.context_window, s.llm.max_output_tokens
    ('endpoint', 3900, 256)
"""

from __future__ import annotations

from typing import Any

from llama_index.core.llms.llm import LLM

from ragidx.config import LLMEndpoint, Settings
from ragidx.providers.tokenizer import TokenCounter

__all__ = ["GivenLLMProvider", "settings_for"]


def settings_for(settings: Settings, llm: LLM) -> Settings:
    """``settings`` with ``[llm]`` describing ``llm``: what its metadata says where ``[llm]`` was not set."""
    endpoint = settings.llm
    meta = llm.metadata
    update: dict[str, Any] = {"model": meta.model_name or endpoint.model}
    if "context_window" not in endpoint.model_fields_set and meta.context_window > 0:
        update["context_window"] = meta.context_window
    if "max_output_tokens" not in endpoint.model_fields_set and meta.num_output > 0:
        update["max_output_tokens"] = meta.num_output
    if endpoint.guards == "auto":
        update["guards"] = "endpoint"
    if "answer_check" not in endpoint.model_fields_set:
        update["answer_check"] = False
    return settings.model_copy(update={"llm": endpoint.model_copy(update=update)})


class GivenLLMProvider:
    """The engine's model factory over one LLM (see the module docstring)."""

    def __init__(self, llm: LLM) -> None:
        self.llm = llm

    def get(self, endpoint: LLMEndpoint) -> LLM:
        return self.llm

    def token_counter(self, endpoint: LLMEndpoint) -> TokenCounter:
        """The configured tiktoken encoding (``[llm] tokenizer``), else ``cl100k_base``."""
        return TokenCounter(endpoint.tokenizer or "cl100k_base")

    def answer_check(self, endpoint: LLMEndpoint) -> float | None:
        return None

    def answer_deadline(self, endpoint: LLMEndpoint, llm: Any, tokens: TokenCounter) -> None:
        return None

    def close(self) -> None:
        """Nothing to stop: the LLM is the caller's."""
