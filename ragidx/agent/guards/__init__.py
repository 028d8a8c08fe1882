"""Answer guards: the rules that judge a model's reply, and the gates before it, switched per model by a profile.

See :mod:`ragidx.agent.guards.chain` for the profiles; one module per kind of rule.

Example:
    >>> from ragidx.agent.guards import GuardChain
    >>> GuardChain.from_profile("off").review("q", "NOT_FOUND", []).not_found
    False
"""

from ragidx.agent.guards.base import AnswerGate, AnswerGuard, Fired, GateInput, GuardInput, GuardResult, Verdict
from ragidx.agent.guards.chain import (
    ALL_NAMES,
    GATE_NAMES,
    GUARD_NAMES,
    PROFILE_NAMES,
    PROFILES,
    GuardChain,
    profile_names,
)
from ragidx.agent.guards.not_found import says_not_found, split_not_found
from ragidx.agent.guards.stream import StreamFilter

__all__ = [
    "ALL_NAMES",
    "GATE_NAMES",
    "GUARD_NAMES",
    "PROFILES",
    "PROFILE_NAMES",
    "AnswerGate",
    "AnswerGuard",
    "Fired",
    "GateInput",
    "GuardChain",
    "GuardInput",
    "GuardResult",
    "StreamFilter",
    "Verdict",
    "profile_names",
    "says_not_found",
    "split_not_found",
]
