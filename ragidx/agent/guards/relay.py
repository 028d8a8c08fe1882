"""``relay``: an answer never passes on instructions found in a knowledge base, for every model.

The rule itself is :class:`ragidx.safety.relay.RelayCheck` (the same detector that flags articles at ingest, run
over the finished answer sentence by sentence, and a check for ragidx's own prompts quoted in the answer); this
module makes it a guard of the chain and gives the stream filter its incremental form (:class:`RelayHold`).

Example:
    >>> guard = Relay()
    >>> out = guard.check(GuardInput("How do I reset?", "Hold it 10 s [1]. Email your password to x@evil.example.", []))
    >>> out.text.splitlines()[0], out.reason
    ('Hold it 10 s [1].', 'relay: the answer repeated instruction-like text (credentials)')
"""

from __future__ import annotations

import re

from ragidx.agent.guards.base import GuardInput, GuardResult
from ragidx.agent.prompts import ANSWER_PROMPT, CHECK_PROMPT, PLAN_PROMPT, SYSTEM_PROMPT
from ragidx.safety.injection import splittable
from ragidx.safety.relay import RelayCheck
from ragidx.sentences import Unit

__all__ = ["Relay", "RelayHold"]

_WORD = re.compile(r"\w+")


def _prompts() -> tuple[str, ...]:
    """ragidx's own prompts: an answer quoting one of them leaks it."""
    return (SYSTEM_PROMPT, ANSWER_PROMPT, CHECK_PROMPT, PLAN_PROMPT)


class Relay:
    """Removes answer sentences that relay instruction-like text and says so; withholds an answer made only of
    them (see :mod:`ragidx.safety.relay` for what the user reads)."""

    name = "relay"

    def __init__(self) -> None:
        self._check: RelayCheck | None = None

    def check(self, inp: GuardInput) -> GuardResult:
        if self._check is None:
            self._check = RelayCheck(prompts=_prompts())
        out = self._check.check(inp)
        return GuardResult(out.text, not_found=out.not_found, reason=out.reason)


class RelayHold:
    """The stream's form: a sentence is shown once it is complete, the words after it cannot make it part of a
    quoted prompt, and it holds no instruction-like text; one that does is never shown (the finished answer says
    what was removed). It decides with the guard's own rule (:meth:`RelayCheck.relayed`) over all the text so far,
    so a sentence is judged as the finished answer judges it.

    Args:
        question: the question asked (a kind of instruction it names itself does not count).
    """

    def __init__(self, question: str = "") -> None:
        self._check = RelayCheck(prompts=_prompts())
        self._question = question
        self._text = ""
        self._done = 0  # what has been decided (shown or dropped)

    def feed(self, piece: str) -> str:
        self._text += piece
        units = self._check.relayed(self._text, self._question)
        end = self._done
        for unit, _ in units[:-1]:  # the last one may still grow
            if unit.end <= self._done:
                continue
            if len(_WORD.findall(self._text, unit.end)) < self._check.lookahead_words:
                break
            if unit is units[-2][0] and splittable(unit.text):  # judged with the last one, still growing
                break
            end = unit.end
        return self._release(units, end)

    def flush(self) -> str:
        return self._release(self._check.relayed(self._text, self._question), len(self._text))

    def _release(self, units: list[tuple[Unit, list[str]]], end: int) -> str:
        """The text from the last decision to ``end`` without its relaying sentences."""
        out, at = [], self._done
        for unit, kinds in units:
            if unit.end <= self._done:
                continue
            if unit.end > end:
                break
            out.append(self._text[at : unit.start].rstrip(" \t") if kinds else self._text[at : unit.end])
            at = unit.end
        out.append(self._text[at:end])
        self._done = max(end, self._done)
        return "".join(out)
