"""What every answer guard and gate takes and returns.

A guard reads the reply as it stands after the guards before it and returns it (changed or not), whether it
is set aside as "not found", and why it fired. A gate runs before the model is asked for an answer and
returns why it should not be asked, or None. Both have a stable ``name``: profiles, overrides and the
answer's record of what fired use it.

Example:
    >>> class Shouting:
    ...     name = "shouting"
    ...     def check(self, inp: GuardInput) -> GuardResult:
    ...         if inp.text.isupper():
    ...             return GuardResult(inp.text.capitalize(), reason="the reply was all capitals")
    ...         return GuardResult(inp.text)
    >>> Shouting().check(GuardInput("q", "USE TABLES.", [Article("t", "Tables", "", "Use tables.")])).reason
    'the reply was all capitals'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ragidx.article import Article, as_articles


@dataclass(frozen=True)
class GuardInput:
    """The reply to check and what it was written from.

    Attributes:
        question: the question as the user asked it.
        text: the reply as it stands after earlier guards.
        sources: the articles shown, in the order the prompt numbers them (``sources[i]`` is ``[i + 1]``), with the
            text the model saw (compressed or cut where the budget did so).
        titles: the shown articles' titles as the prompt wrote them (without section numbers); empty: the
            sources' own titles.
    """

    question: str
    text: str
    sources: Sequence[Article]
    titles: Sequence[str] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", tuple(as_articles(self.sources)))

    def shown_titles(self) -> list[str]:
        """The titles the model saw, one per source."""
        if self.titles:
            return list(self.titles)
        return [s.title or s.kb_id for s in self.sources]


@dataclass(frozen=True)
class GuardResult:
    """What a guard did: the reply after it, whether it is set aside as "not found", and why it fired."""

    text: str
    not_found: bool = False
    reason: str | None = None

    @property
    def fired(self) -> bool:
        return self.reason is not None


class AnswerGuard(Protocol):
    """A rule applied to the model's reply (see the module docstring). A guard whose "not found" is the model's
    own verdict sets ``tells_user = False``: its reason is recorded, the answer's ``not_found_reason`` stays None.
    """

    name: str

    def check(self, inp: GuardInput) -> GuardResult: ...


@dataclass(frozen=True)
class GateInput:
    """What a gate decides on before the model is asked for an answer.

    Attributes:
        question: the question as searched (a follow-up with the question before it).
        sources: the articles the answer's prompt shows.
        retrieved: every article the searches returned, whole (names are looked for here).
        check_reply: the model's one-token reply to the answer check, when it ran.
        check_log_odds: its log P(YES) - log P(NO), when the server reported them.
        check_margin: the margin the check was run with.
    """

    question: str
    sources: Sequence[Article]
    retrieved: Sequence[Article] = ()
    check_reply: str | None = None
    check_log_odds: float | None = None
    check_margin: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", tuple(as_articles(self.sources)))
        object.__setattr__(self, "retrieved", tuple(as_articles(self.retrieved)))


class AnswerGate(Protocol):
    """A rule that keeps the model from being asked (see the module docstring): returns why, or None."""

    name: str

    def check(self, inp: GateInput) -> str | None: ...


@dataclass(frozen=True)
class Fired:
    """A guard or gate that fired on an answer, and why."""

    name: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "reason": self.reason}


@dataclass(frozen=True)
class Verdict:
    """What the guard chain made of a reply.

    Attributes:
        text: the reply after every guard (unchanged when none fired).
        not_found: the reply is set aside as "not found".
        reason: why it was set aside, for the user; None when it was not, or when the model itself said so.
        fired: every guard that fired, in order.
    """

    text: str
    not_found: bool = False
    reason: str | None = None
    fired: list[Fired] = field(default_factory=list)
