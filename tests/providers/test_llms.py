"""LLMProvider builds endpoint LLMs whose connect and read timeouts come from the settings."""

from __future__ import annotations

import httpx

from ragidx.config import LLMEndpoint
from ragidx.providers.llms import EndpointLLM, LLMProvider


def test_an_endpoints_llm_has_its_connect_and_read_timeouts() -> None:
    endpoint = LLMEndpoint(model="m", api_base="http://127.0.0.1:9/v1", connect_timeout_s=3, read_timeout_s=12)
    llm = LLMProvider().get(endpoint)
    assert isinstance(llm, EndpointLLM) and (llm.connect_timeout, llm.read_timeout, llm.timeout) == (3.0, 12.0, 120.0)
    for is_async in (False, True):
        timeout = llm._get_credential_kwargs(is_async=is_async)["timeout"]
        assert timeout == httpx.Timeout(120.0, connect=3.0, read=12.0)
    assert llm.max_retries == 0  # ChatCaller retries, within one read timeout


def test_defaults_fail_a_silent_endpoint_within_half_a_minute() -> None:
    llm = LLMProvider().get(LLMEndpoint(model="m", api_base="http://127.0.0.1:9/v1"))
    assert (llm.connect_timeout, llm.read_timeout) == (5.0, 20.0)
