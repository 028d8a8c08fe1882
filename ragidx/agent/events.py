"""The agent workflow's events: the steps' own (carrying the typed :class:`~ragidx.agent.turn.Turn`) and the
streamed ones a caller reads while a turn runs (answer text, searches, budget reports).

Example:
    >>> AnswerDeltaEvent(delta="Choose ").delta
    'Choose '
"""

from __future__ import annotations

from llama_index.core.llms.llm import ToolSelection
from llama_index.core.workflow import Event
from pydantic import Field

from ragidx.agent.turn import Turn


class DecideEvent(Event):
    turn: Turn


class ToolCallsEvent(Event):
    turn: Turn
    calls: list[ToolSelection]


class AnswerEvent(Event):
    turn: Turn


class AnswerDeltaEvent(Event):
    """Streamed: a piece of the answer text."""

    delta: str


class BudgetReportEvent(Event):
    """Streamed: what the budget hook did before an LLM call (``call``: plan, decide or answer)."""

    report: dict[str, object]  # the BudgetReport as JSON
    call: str = ""
    tokens: int = 0  # the prompt's tokens as sent (the report's ``tokens_after``)
    expected_s: float | None = None  # how long the model should take over it, from its measured speed
    titles: list[str] = Field(default_factory=list)  # of the articles the prompt shows, best first


class SearchEvent(Event):
    """Streamed: a retrieval ran; the titles it found, best first, or the error."""

    query: str
    titles: list[str]
    error: str | None = None
