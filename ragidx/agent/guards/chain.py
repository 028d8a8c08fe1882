"""Guard profiles and the chain that runs one: which rules judge a model's reply, in which order.

The rules exist because small models misbehave in known ways (they echo the prompt, state values from memory,
talk about their sources); a strong model writes right answers that trip them (a comparison with another
product, a value it knows beside the one it cites). So the set of rules is chosen per model:

- ``small-model``: every gate and guard (the local llama.cpp model's default).
- ``endpoint``: the model's own "not found" (a reply citing an article counts as an answer) and ``relay``; marker
  validation always runs (``ragidx.agent.citations.resolve_citations``). The default for OpenAI-compatible
  endpoints.
- ``off``: marker validation only.

``relay`` (an answer never passes on instructions found in an article) is in both model profiles: an instruction
to send a password is wrong in any model's answer.

``enable`` / ``disable`` add or remove guards by name (:data:`GUARD_NAMES`) on top of a profile.

Example:
    >>> chain = GuardChain.from_profile("endpoint")
    >>> chain.names
    ('model_not_found', 'relay')
    >>> v = chain.review("Default?", "It is 128MB [1]. Unlike MySQL or Oracle, it uses the OS cache.", [])
    >>> (v.not_found, v.fired)
    (False, [])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from ragidx.agent.guards.base import AnswerGate, AnswerGuard, Fired, GateInput, GuardInput, Verdict
from ragidx.agent.guards.echo import ArticleCopy, EchoedSourceList, SourceListOnly
from ragidx.agent.guards.entities import EntityRestore
from ragidx.agent.guards.gates import AnswerCheck, MissingIdentifiers, SharesTerms
from ragidx.agent.guards.not_found import ModelSaysNotFound
from ragidx.agent.guards.relay import Relay
from ragidx.agent.guards.source_talk import SourceTalk
from ragidx.agent.guards.stream import StreamFilter
from ragidx.agent.guards.ungrounded import UngroundedNames, UngroundedNumbers, UngroundedShortcuts

ProfileName = Literal["small-model", "endpoint", "off"]
PROFILE_NAMES: tuple[ProfileName, ...] = ("small-model", "endpoint", "off")

GATE_NAMES = ("shares_terms", "missing_identifiers", "answer_check")
"""Gates before the answer, in the order they run."""
GUARD_NAMES = (
    "model_not_found",
    "echoed_source_list",
    "source_list_only",
    "article_copy",
    "ungrounded_numbers",
    "ungrounded_shortcuts",
    "ungrounded_names",
    "source_talk",
    "entities",
    "relay",
)
"""Guards after the answer, in the order they run: the "not found" verdicts first, then the clean-ups."""
ALL_NAMES = GATE_NAMES + GUARD_NAMES

PROFILES: dict[str, tuple[str, ...]] = {
    "small-model": ALL_NAMES,
    # Kept for strong models: only rules whose measured false-positive rate on right answers is 0
    # (benchmarks/guard_replay.py).
    "endpoint": ("model_not_found", "relay"),
    "off": (),
}


def _guard(name: str, profile: str) -> AnswerGuard:
    if name == "model_not_found":
        # A small model cites the articles while it declines ("The articles do not provide … [1]"); a strong
        # one opens a right, cited answer with a hedge ("The page does not say directly, but … [1]").
        return ModelSaysNotFound(cited_is_answer=profile != "small-model")
    guards: dict[str, Callable[[], AnswerGuard]] = {
        "echoed_source_list": EchoedSourceList,
        "source_list_only": SourceListOnly,
        "article_copy": ArticleCopy,
        "ungrounded_numbers": UngroundedNumbers,
        "ungrounded_shortcuts": UngroundedShortcuts,
        "ungrounded_names": UngroundedNames,
        "source_talk": SourceTalk,
        "entities": EntityRestore,
        "relay": Relay,
    }
    return guards[name]()


def _gate(name: str) -> AnswerGate:
    gates: dict[str, Callable[[], AnswerGate]] = {
        "shares_terms": SharesTerms,
        "missing_identifiers": MissingIdentifiers,
        "answer_check": AnswerCheck,
    }
    return gates[name]()


def profile_names(profile: str, enable: Iterable[str] = (), disable: Iterable[str] = ()) -> tuple[str, ...]:
    """The gate and guard names ``profile`` runs with ``enable`` added and ``disable`` removed, in run order.

    Raises:
        ValueError: an unknown profile or guard name (the message lists the known ones).
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown guard profile {profile!r}; use one of {', '.join(PROFILES)}")
    unknown = [n for n in [*enable, *disable] if n not in ALL_NAMES]
    if unknown:
        raise ValueError(f"unknown guard {unknown[0]!r}; the guards are: {', '.join(ALL_NAMES)}")
    chosen = (set(PROFILES[profile]) | set(enable)) - set(disable)
    return tuple(n for n in ALL_NAMES if n in chosen)


def identity(title: str) -> str:
    return title


class GuardChain:
    """Runs a profile's gates and guards and says what fired.

    Args:
        profile: ``small-model``, ``endpoint`` or ``off`` (see the module docstring).
        names: the gates and guards to run (default: the profile's); :func:`profile_names` applies overrides.
        title: an article title as the answer prompt shows it (the prompt may drop a section number): the
            echo and source-talk rules compare the reply with what the model saw.

    Example:
        >>> chain = GuardChain.from_profile("small-model")
        >>> v = chain.review("How many rows?", "It is 65,536 rows [1].", [{"title": "Rows", "content": "Rows."}])
        >>> (v.not_found, [f.name for f in v.fired])
        (True, ['ungrounded_numbers'])
    """

    def __init__(
        self, profile: str, names: Sequence[str] | None = None, *, title: Callable[[str], str] = identity
    ) -> None:
        self.profile = profile
        self.names = tuple(names) if names is not None else profile_names(profile)
        self.title = title
        self.gates = [_gate(n) for n in self.names if n in GATE_NAMES]
        self.guards = [_guard(n, profile) for n in self.names if n in GUARD_NAMES]

    @classmethod
    def from_profile(
        cls,
        profile: str,
        *,
        enable: Iterable[str] = (),
        disable: Iterable[str] = (),
        title: Callable[[str], str] = identity,
    ) -> GuardChain:
        return cls(profile, profile_names(profile, enable, disable), title=title)

    def describe(self) -> dict[str, Any]:
        """The resolved profile: its name and what it runs (shown with every answer)."""
        base = set(PROFILES[self.profile]) if self.profile in PROFILES else set()
        return {
            "profile": self.profile,
            "guards": list(self.names),
            "enabled": [n for n in self.names if n not in base],
            "disabled": [n for n in ALL_NAMES if n in base and n not in self.names],
        }

    @property
    def answer_check(self) -> bool:
        """Whether the profile asks the model the one-token answer check before the answer."""
        return "answer_check" in self.names

    def titles(self, sources: Sequence[dict[str, Any]]) -> list[str]:
        """The sources' titles as the answer prompt shows them."""
        return [self.title(str(s.get("title") or s.get("kb_id") or "")) for s in sources]

    def gate(self, inp: GateInput, *, only: Sequence[str] | None = None) -> Fired | None:
        """The first gate (of ``only``, when given) that keeps the model from being asked, or None."""
        for gate in self.gates:
            if only is not None and gate.name not in only:
                continue
            reason = gate.check(inp)
            if reason is not None:
                return Fired(gate.name, reason)
        return None

    def review(self, question: str, text: str, sources: Sequence[dict[str, Any]]) -> Verdict:
        """Run the guards over the model's reply ``text``: the first that sets it aside as "not found" ends the
        run; the others clean it up in order."""
        inp = GuardInput(question, text.strip(), sources, tuple(self.titles(sources)))
        fired: list[Fired] = []
        for guard in self.guards:
            result = guard.check(inp)
            if result.reason is not None:
                fired.append(Fired(guard.name, result.reason))
            if result.not_found:
                told = getattr(guard, "tells_user", True)
                return Verdict(result.text, not_found=True, reason=result.reason if told else None, fired=fired)
            inp = GuardInput(question, result.text, sources, inp.titles)
        return Verdict(inp.text, fired=fired)

    def stream_filter(self, question: str = "") -> StreamFilter:
        """The incremental form of this chain, for a reply shown while it is written: it shows no text that the
        finished answer withdraws (:mod:`ragidx.agent.guards.stream`)."""
        not_found = next((g for g in self.guards if isinstance(g, ModelSaysNotFound)), None)
        return StreamFilter(self.names, title=self.title, question=question, not_found=not_found)
