"""Chat models from settings, all through the OpenAI protocol (``OpenAILike``).

An endpoint with ``api_base`` is OpenAI, OpenRouter, vLLM or any compatible server; one without is
the local packaged model, whose server :class:`LLMProvider` starts on first use and stops on
``close()``. Everything above this module takes an ``LLM`` and never knows which it got.

Example:
    >>> from ragidx.config import LLMEndpoint
    >>> provider = LLMProvider(threads=1)
    >>> llm = provider.get(LLMEndpoint(model="gpt-4o-mini", api_base="https://api.openai.com/v1",
    ...                                api_key="sk-test", context_window=128000))
    >>> llm.metadata.context_window
    128000
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import httpx
from llama_index.llms.openai_like import OpenAILike
from pydantic import Field

from ragidx.config import LLMEndpoint
from ragidx.providers.local_llm import LocalLLMServer, assemble_gguf, default_cache_dir
from ragidx.providers.speed import AnswerDeadline, SpeedLog, machine_key, probe_speed
from ragidx.providers.tokenizer import GGUFTokenCounter, TokenCounter

logger = logging.getLogger(__name__)

LOCAL_API_KEY = "local-no-key"


class EndpointLLM(OpenAILike):
    """``OpenAILike`` with separate connect and read timeouts (LlamaIndex's ``timeout`` is one number for all).

    ``connect_timeout`` bounds opening the connection, ``read_timeout`` the wait for the reply's first byte and
    for each next piece; ``timeout`` the other phases (sending the request, a free pooled connection).
    :class:`~ragidx.providers.chat.ChatCaller` reads ``read_timeout`` to start no retry after one of them.

    Example:
        >>> llm = EndpointLLM(model="m", api_base="http://127.0.0.1:9/v1", api_key="-", connect_timeout=2,
        ...                   read_timeout=10)
        >>> llm._get_credential_kwargs()["timeout"]
        Timeout(connect=2.0, read=10.0, write=60.0, pool=60.0)
    """

    connect_timeout: float = Field(default=5.0, gt=0, description="Seconds to open a connection.")
    read_timeout: float = Field(
        default=60.0, gt=0, description="Seconds to wait for the reply's first byte, and then for each next piece."
    )

    @classmethod
    def class_name(cls) -> str:
        return "ragidx_endpoint_llm"

    def _get_credential_kwargs(self, is_async: bool = False) -> dict[str, Any]:
        kwargs: dict[str, Any] = super()._get_credential_kwargs(is_async=is_async)
        kwargs["timeout"] = httpx.Timeout(self.timeout, connect=self.connect_timeout, read=self.read_timeout)
        return kwargs


class LLMProvider:
    """Builds ``OpenAILike`` chat models and owns the local servers it had to start.

    Example:
        >>> with LLMProvider() as provider:                           # doctest: +SKIP
        ...     print(provider.get(LLMEndpoint()).complete("Hi").text)
    """

    def __init__(self, *, threads: int = 2, model_cache_dir: Path | None = None) -> None:
        self.threads = threads
        self.model_cache_dir = model_cache_dir
        self._servers: dict[tuple[str, int, int, bool], LocalLLMServer] = {}
        self._lock = threading.Lock()

    def get(self, endpoint: LLMEndpoint) -> EndpointLLM:
        """An LLM for this endpoint; starts the local server when the endpoint is local."""
        if endpoint.is_local:
            api_base = self.local_server(endpoint).start()
            api_key = LOCAL_API_KEY
        else:
            assert endpoint.api_base is not None
            api_base = endpoint.api_base
            api_key = endpoint.api_key.get_secret_value() if endpoint.api_key else LOCAL_API_KEY
        return EndpointLLM(
            model=endpoint.model,
            api_base=api_base,
            api_key=api_key,
            context_window=endpoint.context_window,
            max_tokens=endpoint.max_output_tokens,
            is_chat_model=True,
            is_function_calling_model=True,
            timeout=endpoint.effective_timeout_s,
            connect_timeout=endpoint.connect_timeout_s,
            read_timeout=endpoint.effective_read_timeout_s,
            max_retries=0,  # the agent retries with backoff and then says clearly what failed
            # A new client per call: every question runs on its own event loop (Engine.ask, the dashboard's
            # threads), and a kept-alive connection from a finished loop fails the next call ("Connection error").
            reuse_client=False,
            temperature=endpoint.temperature,
        )

    def token_counter(self, endpoint: LLMEndpoint) -> TokenCounter:
        """How to count this endpoint's tokens: the configured tiktoken encoding, else the local model's own
        vocabulary (tiktoken undercounts Qwen by 10-15%), else ``cl100k_base``."""
        if endpoint.tokenizer:
            return TokenCounter(endpoint.tokenizer)
        if endpoint.is_local:
            return GGUFTokenCounter(assemble_gguf(endpoint.model, self.model_cache_dir))
        return TokenCounter("cl100k_base")

    def answer_check(self, endpoint: LLMEndpoint) -> float | None:
        """The answer check's margin for this endpoint's model (``LLMEndpoint.answer_check``), or None."""
        return endpoint.effective_answer_check

    def answer_deadline(self, endpoint: LLMEndpoint, llm: Any, tokens: TokenCounter) -> AnswerDeadline | None:
        """The endpoint's answer-time target with its model's speed: from the speed log (kept beside the local
        models), else measured once now with one short call. None when the endpoint has no deadline."""
        seconds = endpoint.effective_answer_deadline_s
        if seconds is None:
            return None
        log = SpeedLog((self.model_cache_dir or default_cache_dir()) / "speeds.json")
        key = (
            machine_key(endpoint.model, self.threads) if endpoint.is_local else f"{endpoint.model}|{endpoint.api_base}"
        )
        speed = log.get(key)
        if speed is None:
            try:
                speed = probe_speed(llm, tokens.count)
            except Exception as exc:  # the answer still works, only without the time cap
                logger.warning("could not measure the model's speed (%s); answers are not capped for time", exc)
                return None
            log.put(key, speed)
        return AnswerDeadline(
            seconds,
            speed,
            floor_tokens=endpoint.min_prompt_tokens,
            ceiling_tokens=endpoint.max_answer_prompt_tokens,
            log=log,
            key=key,
        )

    def local_server(self, endpoint: LLMEndpoint) -> LocalLLMServer:
        """The (not yet started) server for a local endpoint; one per model and window."""
        key = (endpoint.model, endpoint.context_window, endpoint.prompt_lookup, endpoint.split_decode)
        with self._lock:
            if key not in self._servers:
                self._servers[key] = LocalLLMServer(
                    endpoint.model,
                    n_ctx=endpoint.context_window,
                    prompt_lookup=endpoint.prompt_lookup,
                    split_decode=endpoint.split_decode,
                    n_threads=self.threads,
                    cache_dir=self.model_cache_dir,
                )
            return self._servers[key]

    def close(self) -> None:
        """Stop every local server this provider started."""
        with self._lock:
            servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            server.stop()

    def __enter__(self) -> LLMProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
