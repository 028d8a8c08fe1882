"""The conversation a flash rerank runs in, handed from the agent to the reranker without new arguments.

Flash sits at the end of the retrieval chain (``ArticleRetriever`` → ``FlashReranker`` as a LlamaIndex node
postprocessor), and nothing on that way carries a conversation: LlamaIndex's ``postprocess_nodes`` takes a
query only. The agent (or any caller) sets the conversation for the duration of a search with
``flash_conversation``; the reranker reads it with ``current_conversation``. A ``ContextVar`` follows the
search into asyncio tasks and ``asyncio.to_thread`` workers and never leaks between concurrent questions.

Only what was said is kept: user and assistant messages with text. Tool calls and tool results (whole
articles as JSON) are left out; flash shows the model its own candidates.

Example:
    >>> with flash_conversation(["user: how do I back up MySQL?"]):
    ...     current_conversation()
    ('user: how do I back up MySQL?',)
    >>> current_conversation()
    ()
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock

__all__ = ["current_conversation", "flash_conversation", "spoken"]

Turn = ChatMessage | str

_CONVERSATION: ContextVar[tuple[Turn, ...]] = ContextVar("ragidx_flash_conversation", default=())


def spoken(messages: Sequence[Turn]) -> tuple[Turn, ...]:
    """The user and assistant messages of ``messages`` that carry text, in order (strings are kept as given)."""
    kept: list[Turn] = []
    for m in messages:
        if isinstance(m, str):
            if m.strip():
                kept.append(m)
            continue
        if m.role not in (MessageRole.USER, MessageRole.ASSISTANT):
            continue
        if any(isinstance(b, ToolCallBlock) for b in m.blocks) or not (m.content or "").strip():
            continue
        kept.append(m)
    return tuple(kept)


@contextmanager
def flash_conversation(messages: Sequence[Turn]) -> Iterator[None]:
    """Within the block, a flash rerank sees ``messages`` (the conversation before the query, oldest first)."""
    token = _CONVERSATION.set(spoken(messages))
    try:
        yield
    finally:
        _CONVERSATION.reset(token)


def current_conversation() -> tuple[Turn, ...]:
    """The conversation set by the innermost ``flash_conversation`` around this call; ``()`` outside one."""
    return _CONVERSATION.get()
