"""What a flash rerank decided: ``FlashResult`` and its ``FlashSelection``s (for callers, metrics, evaluation)."""

from __future__ import annotations

from dataclasses import dataclass, field

from llama_index.core.schema import NodeWithScore

from ragidx.retrieval.flash.parsing import JsonRepair
from ragidx.retrieval.flash.trace import FlashDecision, FlashTrace, SelectionSource

__all__ = ["FlashResult", "FlashSelection"]


@dataclass(frozen=True)
class FlashSelection:
    """One returned candidate: its ``[ID:n]``, kb_id, the model's reason and excerpt (if any)."""

    display_id: int
    kb_id: str
    reason: str = ""
    excerpt: str | None = None


@dataclass(frozen=True)
class FlashResult:
    """Everything a rerank decided, for callers, metrics and evaluation.

    ``prompt_tokens_shown`` counts what the model was shown: the turn-1 prompt (system + user) plus
    every tool result. ``input_tokens``/``output_tokens`` are billed tokens (from the endpoint's usage
    when reported, else counted), the follow-up rewrite's included. ``query`` is the query the model saw;
    ``original_query`` the one given, when a contextualizer rewrote it from the conversation.
    """

    nodes: list[NodeWithScore]
    selections: list[FlashSelection]
    decision: FlashDecision
    source: SelectionSource
    tool_calls: int = 0
    requested_ids: list[int] = field(default_factory=list)
    invented_ids: list[int] = field(default_factory=list)
    repairs: tuple[JsonRepair, ...] = ()
    candidates_shown: int = 0
    prompt_tokens_shown: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    duration_s: float = 0.0
    excerpts_dropped: int = 0
    error: str | None = None
    trace: FlashTrace | None = None
    query: str = ""
    original_query: str | None = None

    @property
    def selected_kb_ids(self) -> list[str]:
        return [s.kb_id for s in self.selections]

    @property
    def reasons(self) -> dict[str, str]:
        return {s.kb_id: s.reason for s in self.selections}

    @property
    def invented_count(self) -> int:
        return len(self.invented_ids)

    @property
    def is_fallback(self) -> bool:
        return self.decision not in (FlashDecision.ACCEPTED, FlashDecision.NO_CANDIDATES)
