"""The question log for the surfaces that answer one question and are done: ``ragidx ask`` (surface ``cli``) and
the MCP ``ask`` tool (surface ``mcp``), like ``ragidx serve`` and the dashboard, under the same ``[questions]``
settings (``questions.enabled = false`` logs nothing).

:func:`logged_answer` wraps a synchronous turn (``ragidx ask``'s, streamed or whole); the MCP tool awaits
:meth:`~ragidx.questions.recorder.QuestionRecorder.logged` with ``surface="mcp"``. Either way a log that cannot be
written never fails the answer, and a turn that raises is logged as an error and raises on.

Example:
    >>> answer = logged_answer(engine, "How do I print?", lambda: engine.ask("How do I print?"), surface="cli")
    ... # doctest: +SKIP
    >>> answer.question_id is not None  # doctest: +SKIP
    True
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ragidx.questions.recorder import recorder_for
from ragidx.stores.access import Principal

if TYPE_CHECKING:
    from ragidx.agent.answer import Answer

__all__ = ["logged_answer"]


def logged_answer(
    engine: Any,
    question: str,
    ask: Callable[[], Answer],
    *,
    surface: str,
    user: str | None = None,
    groups: Iterable[str] | None = None,
) -> Answer:
    """``ask()``'s answer, its turn logged under ``surface`` as asked by ``user`` / ``groups`` (the time is when
    it was asked); the answer comes back with ``question_id`` set when it was logged. A turn that raises is logged
    as an error and raises on."""
    recorder = recorder_for(engine)
    turn = recorder.turn(question, surface=surface, reader=Principal.of(user, groups))

    def record(answer: Answer | None, error: BaseException | None = None) -> str | None:
        return recorder.record(
            answer, question=question, surface=surface, reader=turn.reader, id=turn.id, time=turn.time, error=error
        )

    try:
        answer = ask()
    except Exception as exc:
        record(None, exc)
        raise
    qid = record(answer)
    return replace(answer, question_id=qid) if qid is not None else answer
