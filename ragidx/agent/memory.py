"""Conversations kept between turns, by session id.

Example:
    >>> m = SessionMemory()
    >>> m.get("s1")
    []
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from llama_index.core.base.llms.types import ChatMessage

from ragidx.article import SearchResult


class SessionMemory:
    """Conversation messages per session, in memory. Thread-safe.

    Example:
        >>> m = SessionMemory()
        >>> m.get("s1")
        []
    """

    def __init__(self) -> None:
        self._sessions: dict[str, list[ChatMessage]] = {}
        self._results: dict[str, dict[str, SearchResult]] = {}
        self._lock = threading.Lock()

    def get(self, session_id: str | None) -> list[ChatMessage]:
        if session_id is None:
            return []
        with self._lock:
            return list(self._sessions.get(session_id, []))

    def results(self, session_id: str | None) -> dict[str, SearchResult] | None:
        """The search results of the conversation's tool messages, by call id (``None``: not kept, e.g. a
        history set from outside)."""
        with self._lock:
            kept = self._results.get(session_id) if session_id is not None else None
            return dict(kept) if kept is not None else None

    def set(
        self, session_id: str | None, messages: Sequence[ChatMessage], results: dict[str, SearchResult] | None = None
    ) -> None:
        if session_id is None:
            return
        with self._lock:
            self._sessions[session_id] = list(messages)
            if results is None:
                self._results.pop(session_id, None)
            else:
                self._results[session_id] = dict(results)

    def clear(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)
            self._results.pop(session_id, None)
