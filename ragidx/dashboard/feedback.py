"""The dashboard's questions and thumbs in the question log (:mod:`ragidx.questions`).

Each answer the chat shows (or the error it ended in) is logged with its turn's id, surface ``dashboard``, as the
public reader (the dashboard has no sign-in); the thumbs under it store the vote on that id, and clearing them
takes the vote back. Nothing is written when ``[questions] enabled`` is off, and a log that cannot be written
never costs the reader their answer.

Example:
    >>> rating_message("down")
    'Thank you: this answer is marked as wrong for whoever looks after the knowledge base.'
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from ragidx.agent.answer import Answer
from ragidx.questions.log import QuestionNotFound
from ragidx.questions.recorder import QuestionLogOff, recorder_for

__all__ = ["Rating", "rate", "rating_message", "record_turn"]

logger = logging.getLogger(__name__)

Rating = Literal["up", "down"]


def record_turn(
    engine: Any, question: str, answer: Answer | None, *, turn_id: str, error: BaseException | None = None
) -> None:
    """Log one chat turn of the dashboard (never raises: see :class:`~ragidx.questions.recorder.QuestionRecorder`)."""
    recorder_for(engine).record(answer, question=question, surface="dashboard", id=turn_id, error=error)


def rate(engine: Any, turn_id: str, rating: Rating | None) -> str:
    """Store the thumbs on the turn ``turn_id`` (None: taken back); returns what to tell the reader."""
    try:
        recorder_for(engine).feedback(turn_id, rating)
    except QuestionLogOff:
        return "Ratings are not kept here: the question log is off."
    except QuestionNotFound:
        return "This answer is no longer in the question log, so its rating was not kept."
    except Exception as exc:  # the store is down: say so, keep the page
        logger.warning("a rating could not be stored: %s", exc)
        return f"Your rating could not be saved: {exc}"
    return rating_message(rating)


def rating_message(rating: Rating | None) -> str:
    """What the dashboard says once a rating is stored."""
    if rating == "down":
        return "Thank you: this answer is marked as wrong for whoever looks after the knowledge base."
    if rating == "up":
        return "Thank you: recorded."
    return "Your rating is taken back."
