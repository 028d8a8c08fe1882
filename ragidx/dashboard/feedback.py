"""Feedback on the dashboard's answers: a thumbs up or down, appended to a JSONL file in the data dir.

Interim: one line per click in ``<data_dir>/feedback.jsonl``, for whoever tunes the knowledge base to read (what
was asked, what was answered, what it cited, which model, and the rating), until feedback has a proper home (a
table beside the article store, an endpoint of ``ragidx serve``). A rating changed later is a second line; the
last line of an answer's ``answer_id`` counts. Lines are appended whole under a lock, so two sessions clicking at
once never interleave. Nothing is sent anywhere.

Example:
    >>> import tempfile
    >>> from ragidx.agent.answer import Answer
    >>> log = FeedbackLog(Path(tempfile.mkdtemp()))
    >>> log.record(Answer(question="q", text="t"), "down", answer_id="a1")["rating"]
    'down'
    >>> [r["answer_id"] for r in log.read()]
    ['a1']
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Literal

from ragidx.agent.answer import Answer

__all__ = ["FEEDBACK_FILE", "FeedbackLog", "Rating"]

FEEDBACK_FILE = "feedback.jsonl"
"""The feedback file's name, in the data dir."""

Rating = Literal["up", "down"]
_LOCK = threading.Lock()  # one writer at a time in this process (Streamlit runs each session in a thread)


class FeedbackLog:
    """Appends ratings of answers to ``<data_dir>/feedback.jsonl``.

    Args:
        data_dir: the knowledge base's data dir (``Settings.data_dir``); made if missing.
    """

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / FEEDBACK_FILE

    def record(
        self, answer: Answer, rating: Rating | None, *, answer_id: str, session_id: str | None = None
    ) -> dict[str, Any]:
        """Append one line: ``rating`` (``None``: the rating was taken back) of ``answer``; returns the line.

        Raises:
            ValueError: ``rating`` is neither ``"up"``, ``"down"`` nor ``None``.
        """
        if rating not in ("up", "down", None):
            raise ValueError(f"rating {rating!r}: give 'up', 'down' or None (taken back)")
        line = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "answer_id": answer_id,
            "session_id": session_id,
            "rating": rating,
            "question": answer.question,
            "answer": answer.text,
            "not_found": answer.not_found,
            "cited": [c.kb_id for c in answer.citations],
            "shown": [str(a.get("kb_id", "")) for a in answer.articles],
            "model": answer.model,
        }
        text = json.dumps(line, ensure_ascii=False) + "\n"
        with _LOCK:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(text)
        return line

    def read(self) -> list[dict[str, Any]]:
        """Every line recorded, oldest first (none when the file does not exist)."""
        if not self.path.is_file():
            return []
        with self.path.open(encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]
