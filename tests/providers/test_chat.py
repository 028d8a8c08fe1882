from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import openai
import pytest
from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole, ToolCallBlock

from ragidx.providers.chat import ChatCaller, ContextOverflowError, LLMUnavailableError, capped, to_inline, usage
from tests.endpoints import SilentServer, dead_endpoint
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


def test_capped_sends_its_own_max_tokens_where_a_call_argument_is_ignored() -> None:
    sent: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        reply = {"role": "assistant", "content": "Hello"}
        body = {
            "id": "1",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "message": reply, "finish_reason": "length"}],
        }
        return httpx.Response(200, json=body)

    from llama_index.llms.openai_like import OpenAILike

    client = httpx.Client(transport=httpx.MockTransport(handler))
    llm = OpenAILike(
        model="m", api_base="http://127.0.0.1:9/v1", api_key="-", max_tokens=512, http_client=client, is_chat_model=True
    )
    hi = [ChatMessage(role=MessageRole.USER, content="Hi")]
    llm.chat(hi, max_tokens=1)
    capped(llm, 1).chat(hi)
    assert [body["max_tokens"] for body in sent] == [512, 1]  # LlamaIndex's own field wins over the argument
    assert llm.max_tokens == 512  # the original is not changed
    fake = ScriptedLLM([])
    assert capped(fake, 1) is fake  # no such field: the call's argument counts


class _Stream(ScriptedLLM):
    """Streams the given OpenAI chunks (``(text, finish_reason)``), as an OpenAI endpoint's client does."""

    chunks: list[tuple[str, str | None]] = []

    async def astream_chat(self, messages, **kwargs):  # type: ignore[no-untyped-def]
        from openai.types.chat import ChatCompletionChunk

        self._reply(list(messages), kwargs)  # recorded; the script's step is not used

        async def gen():  # type: ignore[no-untyped-def]
            for text, finish in self.chunks:
                raw = ChatCompletionChunk.model_validate(
                    {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
                     "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
                )  # fmt: skip
                yield ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=text, raw=raw)

        return gen()


def test_a_reply_stream_cut_off_before_its_finish_reason_is_an_error_not_an_answer() -> None:
    """llama-cpp-python's server (with interrupt_requests) ends a streamed reply when another request comes, with
    no finish reason: the empty or half answer was passed on, and an empty one read as "not found"."""
    cut = _Stream(["", ""], cycle=True)
    cut.chunks = [("Use ", None), ("Table", None)]
    with pytest.raises(LLMUnavailableError, match="without a finish reason"):
        asyncio.run(ChatCaller(cut, retries=1, backoff_s=0.0).astream([], lambda piece: None))
    assert len(cut.calls) == 2  # retried once, as endpoint trouble

    whole = _Stream(["", ""], cycle=True)
    whole.chunks = [("Use ", None), ("Table [1].", None), ("", "stop")]
    pieces: list[str] = []
    assert asyncio.run(ChatCaller(whole).astream([], pieces.append)) == "Use Table [1]." == "".join(pieces)


def test_a_stream_broken_off_by_a_dead_server_is_retried_then_reported() -> None:
    """A model server killed mid-reply surfaces as httpx's own RemoteProtocolError from the stream's body (the
    openai client does not wrap it): endpoint trouble, not a bug passed through."""
    broken = httpx.RemoteProtocolError("peer closed connection without sending complete message body")
    llm = ScriptedLLM([broken, broken])
    with pytest.raises(LLMUnavailableError, match="failed 2 times"):
        asyncio.run(ChatCaller(llm, retries=1, backoff_s=0.0).astream([], lambda piece: None))
    assert len(llm.calls) == 2


# --- real loopback endpoints that fail ---------------------------------------------------------------
def _endpoint_llm(url: str, *, read_timeout: float = 5.0) -> Any:
    from ragidx.providers.llms import EndpointLLM

    return EndpointLLM(
        model="m",
        api_base=url,
        api_key="-",
        is_chat_model=True,
        max_retries=0,
        reuse_client=False,
        connect_timeout=2.0,
        read_timeout=read_timeout,
    )


HI = [ChatMessage(role=MessageRole.USER, content="Hi")]


def test_a_dead_port_is_retried_and_reported_with_its_cause_and_what_to_do() -> None:
    url = dead_endpoint()
    with pytest.raises(LLMUnavailableError) as info:
        asyncio.run(ChatCaller(_endpoint_llm(url), retries=2, backoff_s=0.01).achat(HI))
    message = str(info.value)
    assert f"'m' at {url} failed 3 times" in message  # refused connections are retried within the window
    assert "connection refused" in message and "RAGIDX_LLM__API_BASE" in message
    assert not info.value.timed_out
    for stream in (False, True):  # the streamed call says the same
        caller = ChatCaller(_endpoint_llm(url), retries=0)
        with pytest.raises(LLMUnavailableError, match="failed 1 time in .* connection refused"):
            asyncio.run(caller.astream(HI, print) if stream else caller.achat(HI))


def test_a_silent_endpoint_fails_after_one_read_timeout_however_many_retries() -> None:
    with SilentServer() as server:
        caller = ChatCaller(_endpoint_llm(server.url, read_timeout=1.0), retries=3, backoff_s=0.01)
        started = time.monotonic()
        with pytest.raises(LLMUnavailableError) as info:
            asyncio.run(caller.achat(HI))
        took = time.monotonic() - started
        assert len(server.accepted) == 1  # no retry started after the read timeout had passed
    assert 1.0 <= took < 3.0, took  # one read timeout, not four
    assert info.value.timed_out
    assert "failed 1 time in" in str(info.value) and "sent no reply within 1 s (read_timeout_s)" in str(info.value)
    assert "RAGIDX_LLM__READ_TIMEOUT_S" in str(info.value)


def test_a_silent_endpoint_times_out_a_streamed_call_too() -> None:
    with SilentServer() as server:
        caller = ChatCaller(_endpoint_llm(server.url, read_timeout=1.0), retries=2)
        started = time.monotonic()
        with pytest.raises(LLMUnavailableError, match="no reply within 1 s"):
            asyncio.run(caller.astream(HI, print))
    assert time.monotonic() - started < 3.0


def test_an_explicit_retry_window_overrides_the_llms_read_timeout() -> None:
    with SilentServer() as server:
        caller = ChatCaller(_endpoint_llm(server.url, read_timeout=0.5), retries=1, backoff_s=0.0, retry_window_s=60)
        with pytest.raises(LLMUnavailableError, match="failed 2 times"):
            asyncio.run(caller.achat(HI))
        assert len(server.accepted) == 2


@pytest.mark.parametrize(
    ("status", "advice"),
    [
        (429, "rate limit"),
        (503, "overloaded or restarting"),
        (500, "its log says why"),
    ],
)
def test_an_http_error_says_what_its_status_means(status: int, advice: str) -> None:
    """A 500 is a server failing on the request (llama.cpp's server answers 500 to a message format it rejects),
    not an overloaded one; a 429 is a rate limit."""
    from ragidx.providers.chat import unavailable_reason

    response = httpx.Response(status, request=httpx.Request("POST", "http://127.0.0.1:1/v1/chat/completions"))
    exc = openai.APIStatusError(f"Error code: {status}", response=response, body=None)
    what, todo = unavailable_reason(exc, None)
    assert what.startswith(f"HTTP {status} (")
    assert advice in todo
    assert ("overloaded" in todo) == (status == 503)
