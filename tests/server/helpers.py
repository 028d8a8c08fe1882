"""A real uvicorn server on a loopback port, in a thread, for the server tests; and a slow streaming model."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from llama_index.core.base.llms.types import ChatMessage, ChatResponse, ChatResponseAsyncGen, MessageRole

from ragidx.providers.playback import PlaybackLLM


@contextmanager
def running(app: Any) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 (a free port) until the block ends; yields the base URL."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class SlowWriter(PlaybackLLM):
    """Answers every call with ``words`` words, streamed one every ``pause_s`` seconds; counts the words it wrote
    (a stream that is closed early stops writing, as a model server does for a client that went away)."""

    model_name: str = "slow"
    words: int = 40
    pause_s: float = 0.1
    written: int = 0

    def _reply(self, messages: list[ChatMessage], kwargs: dict[str, Any]) -> ChatResponse:
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content="Use Table [1]."))

    async def astream_chat(self, messages: Any, **kwargs: Any) -> ChatResponseAsyncGen:
        async def gen() -> ChatResponseAsyncGen:
            text = ""
            for i in range(self.words):
                await asyncio.sleep(self.pause_s)
                piece = f"word{i} "
                text += piece
                self.written += 1
                yield ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=piece)

        return gen()
