from __future__ import annotations

import asyncio

import httpx
import openai
import pytest
from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole, ToolCallBlock

from ragidx.providers.chat import ChatCaller, ContextOverflowError, LLMUnavailableError, to_inline, usage
from tests.fakes.scripted_llm import ScriptedLLM

URL = "http://127.0.0.1:9/v1/chat/completions"


def _bad_request(text: str) -> openai.BadRequestError:
    response = httpx.Response(400, request=httpx.Request("POST", URL))
    return openai.BadRequestError(text, response=response, body=None)


def test_the_endpoints_overflow_answer_carries_its_own_prompt_count() -> None:
    llm = ScriptedLLM([_bad_request("Requested tokens (4200) exceed context window of 4096")])
    with pytest.raises(ContextOverflowError) as info:
        asyncio.run(ChatCaller(llm, max_output_tokens=512).achat([]))
    assert info.value.prompt_tokens == 4200 - 512 and len(llm.calls) == 1


def test_a_timeout_is_retried_then_reported_as_timed_out() -> None:
    llm = ScriptedLLM([TimeoutError("read timed out"), TimeoutError("read timed out")])
    with pytest.raises(LLMUnavailableError, match="failed 2 times") as info:
        asyncio.run(ChatCaller(llm, retries=1, backoff_s=0.0).achat([]))
    assert info.value.timed_out and len(llm.calls) == 2


def test_usage_reads_openai_and_input_output_names() -> None:
    msg = ChatMessage(role=MessageRole.ASSISTANT, content="x")
    assert usage(ChatResponse(message=msg, raw={"usage": {"prompt_tokens": 7, "completion_tokens": 2}})) == {
        "prompt_tokens": 7,
        "completion_tokens": 2,
    }
    assert usage(ChatResponse(message=msg, raw={"usage": {"input_tokens": 5}})) == {
        "prompt_tokens": 5,
        "completion_tokens": 0,
    }
    assert usage(ChatResponse(message=msg)) is None


def test_inline_transport_turns_tool_traffic_into_plain_text() -> None:
    call = ChatMessage(
        role=MessageRole.ASSISTANT,
        blocks=[ToolCallBlock(tool_call_id="c1", tool_name="search", tool_kwargs={"query": "tables"})],
    )
    result = ChatMessage(role=MessageRole.TOOL, content="2 hits", additional_kwargs={"name": "search"})
    out = to_inline([call, result])
    assert [(m.role, m.content) for m in out] == [
        (MessageRole.ASSISTANT, 'Calling search({"query": "tables"})'),
        (MessageRole.USER, "Result of search:\n2 hits"),
    ]
