"""A recorded flash rerank: inputs, every message sent, every response, and the decision.

Saved as JSON, a trace can be replayed offline (``ragidx.retrieval.flash.replay``) to check a prompt
or parser change against real traffic. Traces hold the candidates' full text (replay needs it to
rebuild tool results): treat trace files like the knowledge base itself.

Example:
    >>> trace = FlashTrace(query="q", today="2026-01-04", decision="accepted", source="model")
    >>> FlashTrace.model_validate_json(trace.model_dump_json()).query
    'q'
"""

from __future__ import annotations

import datetime as dt
from enum import StrEnum
from pathlib import Path
from typing import Any

from llama_index.core.schema import NodeWithScore, TextNode
from pydantic import BaseModel, Field

__all__ = [
    "FlashDecision",
    "FlashTrace",
    "SelectionSource",
    "TraceCandidate",
    "TraceMessage",
    "TraceResponse",
    "TraceToolCall",
    "TraceTurn",
]

TRACE_VERSION = 1


class FlashDecision(StrEnum):
    """How a rerank ended. Everything but ``ACCEPTED`` and ``NO_CANDIDATES`` is a fallback."""

    ACCEPTED = "accepted"  # a valid JSON answer (possibly healed); an empty one means "nothing relevant"
    INVALID_JSON = "invalid_json"  # the final reply had no usable JSON
    INVENTED_IDS = "invented_ids"  # valid JSON, but every id was not among the candidates
    TIMEOUT = "timeout"  # the total time budget ran out
    TOO_MANY_TOOL_CALLS = "too_many_tool_calls"  # the model kept calling the tool past the limit
    API_ERROR = "api_error"  # the LLM call raised
    PROTOCOL_VIOLATION = "protocol_violation"  # forced mode: the reply skipped the required tool call
    NO_CANDIDATES = "no_candidates"  # nothing to rerank; the LLM was not called


class SelectionSource(StrEnum):
    """Where the returned list came from."""

    MODEL = "model"  # the model's final answer
    TOOL_REQUESTS = "tool_requests"  # the first ids the model asked to read (fallback after a tool call)
    UPSTREAM = "upstream"  # the input order (fallback when the model gave nothing usable)
    NONE = "none"


class TraceToolCall(BaseModel):
    id: str = ""
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class TraceMessage(BaseModel):
    role: str
    content: str = ""
    tool_calls: list[TraceToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None


class TraceResponse(BaseModel):
    """What came back from one LLM call: a reply, or an error (``error_kind``: timeout/api_error)."""

    text: str = ""
    tool_calls: list[TraceToolCall] = Field(default_factory=list)
    usage: dict[str, int] | None = None
    error_kind: str | None = None
    error: str | None = None


class TraceTurn(BaseModel):
    """One LLM call: the messages added since the previous call, call options, and the response."""

    new_messages: list[TraceMessage] = Field(default_factory=list)
    options: dict[str, Any] = Field(default_factory=dict)
    response: TraceResponse | None = None


class TraceCandidate(BaseModel):
    display_id: int
    kb_id: str
    title: str
    text: str
    date: str | None = None
    score: float | None = None


class FlashTrace(BaseModel):
    """A whole rerank, JSON-serialisable. ``save``/``load`` round-trip it.

    Example:
        >>> t = FlashTrace(query="q", today="2026-01-04", decision="timeout", source="upstream")
        >>> t.decision is FlashDecision.TIMEOUT
        True
    """

    version: int = TRACE_VERSION
    created_at: str = Field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    model_name: str = ""
    settings: dict[str, Any] = Field(default_factory=dict)
    query: str
    original_query: str | None = Field(
        default=None, description="The query as given, when a contextualizer rewrote it into ``query``."
    )
    today: str
    conversation: list[str] = Field(default_factory=list)
    user_facts: list[str] = Field(default_factory=list)
    candidates: list[TraceCandidate] = Field(default_factory=list)
    turns: list[TraceTurn] = Field(default_factory=list)
    decision: FlashDecision
    source: SelectionSource
    selected_kb_ids: list[str] = Field(default_factory=list)
    reasons: list[str] = Field(default_factory=list)

    def save(self, path: str | Path) -> Path:
        """Write the trace as pretty JSON (UTF-8); returns the path."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(self.model_dump_json(indent=2), encoding="utf-8")
        return target

    @classmethod
    def load(cls, path: str | Path) -> FlashTrace:
        """Read a trace written by ``save``."""
        trace = cls.model_validate_json(Path(path).read_text(encoding="utf-8"))
        if trace.version > TRACE_VERSION:
            raise ValueError(
                f"trace {path} has version {trace.version}; this ragidx reads up to {TRACE_VERSION}: "
                "upgrade ragidx to replay it"
            )
        return trace

    @property
    def today_date(self) -> dt.date:
        return dt.date.fromisoformat(self.today)

    def to_nodes(self) -> list[NodeWithScore]:
        """The recorded candidates as input nodes, in their original order."""
        nodes = []
        for c in self.candidates:
            meta: dict[str, Any] = {"kb_id": c.kb_id, "title": c.title}
            if c.date:
                meta["date"] = c.date
            nodes.append(NodeWithScore(node=TextNode(id_=c.kb_id, text=c.text, metadata=meta), score=c.score))
        return nodes
