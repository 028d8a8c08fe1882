"""Guard profiles and the chain that runs one: which rules judge a model's reply, in which order.

The rules exist because small models misbehave in known ways (they echo the prompt, state values from memory,
talk about their sources); a strong model writes right answers that trip them (a comparison with another
product, a value it knows beside the one it cites). So the set of rules is chosen per model:

- ``small-model``: every gate and guard measured on the local llama.cpp model (its default); a profile lists its
  rules by name (:data:`PROFILES`), so a built-in rule added later joins none until it is listed.
- ``endpoint``: the model's own "not found" (a reply citing an article counts as an answer) and ``relay``; marker
  validation always runs (``ragidx.agent.citations.resolve_citations``). The default for OpenAI-compatible
  endpoints.
- ``off``: marker validation only.

``relay`` (an answer never passes on instructions found in an article) is in both model profiles: an instruction
to send a password is wrong in any model's answer.

``enable`` / ``disable`` add or remove guards by name (:data:`GUARD_NAMES`) on top of a profile.

A program adds its own gates and guards as objects (``GuardChain.from_profile("endpoint", enable=[MyGuard()])``):
each has a ``name``, a ``check`` (a guard's takes a :class:`GuardInput` and returns a :class:`GuardResult`, a
gate's takes a :class:`GateInput` and returns why the model is not asked, or None) and a ``stream_form``, how it
acts on a reply shown while it is written (:mod:`ragidx.agent.guards.stream`): ``"end"``, it may set the reply
aside or change it anywhere, so a stream holds the reply until it is complete; ``"clean-up"``, it changes text
piece by piece and gives ``stream_hold()``, an object whose ``feed(piece)`` returns what can be shown now and
``flush()`` the rest; ``"none"``, it is a gate. An object without one is refused: a stream could otherwise show
text its ``check`` then withdraws. (``"opening"`` is ``model_not_found``'s alone.) A built-in rule is one entry
of ``_BUILT_INS`` here, its stream form in ``STREAM_FORMS`` (which also makes it a gate or a guard), and its name
in each profile that runs it.

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
from typing import Any, Literal, cast

from ragidx.agent.guards.base import AnswerGate, AnswerGuard, Fired, GateInput, GuardInput, Verdict
from ragidx.agent.guards.echo import ArticleCopy, EchoedSourceList, SourceListOnly
from ragidx.agent.guards.entities import EntityRestore
from ragidx.agent.guards.gates import AnswerCheck, MissingIdentifiers, SharesTerms
from ragidx.agent.guards.not_found import ModelSaysNotFound
from ragidx.agent.guards.relay import Relay
from ragidx.agent.guards.source_talk import SourceTalk
from ragidx.agent.guards.stream import STREAM_FORMS, StreamFilter, stream_form_of
from ragidx.agent.guards.ungrounded import UngroundedNames, UngroundedNumbers, UngroundedShortcuts
from ragidx.article import Article, as_articles

ProfileName = Literal["small-model", "endpoint", "off"]
PROFILE_NAMES: tuple[ProfileName, ...] = ("small-model", "endpoint", "off")

Rule = AnswerGuard | AnswerGate
"""A gate or a guard: a built-in one is named, a program's own is passed as an object (see the module docstring)."""

_BUILT_INS: dict[str, Callable[[str], Rule]] = {
    # Gates before the answer, in the order they run (their stream form is "none").
    "shares_terms": lambda profile: SharesTerms(),
    "missing_identifiers": lambda profile: MissingIdentifiers(),
    "answer_check": lambda profile: AnswerCheck(),
    # Guards after the answer, in the order they run: the "not found" verdicts first, then the clean-ups.
    # A small model cites the articles while it declines ("The articles do not provide … [1]"); a strong one opens
    # a right, cited answer with a hedge ("The page does not say directly, but … [1]").
    "model_not_found": lambda profile: ModelSaysNotFound(cited_is_answer=profile != "small-model"),
    "echoed_source_list": lambda profile: EchoedSourceList(),
    "source_list_only": lambda profile: SourceListOnly(),
    "article_copy": lambda profile: ArticleCopy(),
    "ungrounded_numbers": lambda profile: UngroundedNumbers(),
    "ungrounded_shortcuts": lambda profile: UngroundedShortcuts(),
    "ungrounded_names": lambda profile: UngroundedNames(),
    "source_talk": lambda profile: SourceTalk(),
    "entities": lambda profile: EntityRestore(),
    "relay": lambda profile: Relay(),
}
"""Every built-in gate and guard by name, in run order, with what makes it for a profile: the one place a built-in
rule is added, besides its stream form (:data:`~ragidx.agent.guards.stream.STREAM_FORMS`, which also says whether
it is a gate) and the profiles that list it."""

ALL_NAMES: tuple[str, ...] = tuple(_BUILT_INS)
GATE_NAMES: tuple[str, ...] = tuple(n for n in ALL_NAMES if STREAM_FORMS.get(n) == "none")
"""Gates before the answer, in the order they run."""
GUARD_NAMES: tuple[str, ...] = tuple(n for n in ALL_NAMES if n not in GATE_NAMES)
"""Guards after the answer, in the order they run: the "not found" verdicts first, then the clean-ups."""

PROFILES: dict[str, tuple[str, ...]] = {
    # Every rule there was when the profile was measured; a built-in rule added later joins it only when it is
    # listed here, after its false positives on the local model's answers were measured (benchmarks/guard_replay.py).
    "small-model": (
        "shares_terms",
        "missing_identifiers",
        "answer_check",
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
    ),
    # Kept for strong models: only rules whose measured false-positive rate on right answers is 0
    # (benchmarks/guard_replay.py).
    "endpoint": ("model_not_found", "relay"),
    "off": (),
}
"""The rules each profile runs, by name (run order comes from :data:`ALL_NAMES`)."""


def _built_in(name: str, profile: str) -> Rule:
    return _BUILT_INS[name](profile)


def checked_rule(rule: object) -> Rule:
    """``rule`` when it is a gate or guard a chain can run: a ``name`` (not a built-in one), a ``stream_form`` (see
    :mod:`ragidx.agent.guards.stream`) and a ``check``; a ``clean-up`` also gives ``stream_hold()``.

    Raises:
        ValueError: what the object lacks, and what to give it.
    """
    name = getattr(rule, "name", None)
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a guard object needs a name (a str attribute 'name'); {type(rule).__name__} has none")
    if name in _BUILT_INS:
        raise ValueError(f"guard {name!r}: that is a built-in guard's name; give yours another")
    if not callable(getattr(rule, "check", None)):
        raise ValueError(f"guard {name!r} has no check method: a guard's check(GuardInput) returns a GuardResult")
    stream_form_of(rule)  # its stream form, or a clear error
    return cast(Rule, rule)


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
        names: the gates and guards to run, in order (default: the profile's): built-in ones by name, a
            program's own as objects (:func:`checked_rule` says what one needs); :func:`profile_names` applies
            overrides, :meth:`from_profile` adds objects after the profile's rules.
        title: an article title as the answer prompt shows it (the prompt may drop a section number): the
            echo and source-talk rules compare the reply with what the model saw.

    Raises:
        ValueError: an unknown name, an object that is not a usable gate or guard, or a name twice.

    Example:
        >>> chain = GuardChain.from_profile("small-model")
        >>> v = chain.review("How many rows?", "It is 65,536 rows [1].", [Article("r", "Rows", "", "Rows.")])
        >>> (v.not_found, [f.name for f in v.fired])
        (True, ['ungrounded_numbers'])
    """

    def __init__(
        self, profile: str, names: Sequence[str | Rule] | None = None, *, title: Callable[[str], str] = identity
    ) -> None:
        self.profile = profile
        rules: list[Rule] = []
        for entry in names if names is not None else profile_names(profile):
            if isinstance(entry, str):
                if entry not in _BUILT_INS:
                    raise ValueError(f"unknown guard {entry!r}; the guards are: {', '.join(ALL_NAMES)}")
                rule = _built_in(entry, profile)
            else:
                rule = checked_rule(entry)
            if any(r.name == rule.name for r in rules):
                raise ValueError(f"guard {rule.name!r} is in the chain twice: list it once")
            rules.append(rule)
        self.rules: tuple[Rule, ...] = tuple(rules)
        """Every gate and guard, in the order given."""
        self.names = tuple(r.name for r in rules)
        self.title = title
        self.gates = [cast(AnswerGate, r) for r in rules if self._is_gate(r)]
        self.guards = [cast(AnswerGuard, r) for r in rules if not self._is_gate(r)]

    @staticmethod
    def _is_gate(rule: Rule) -> bool:
        return stream_form_of(rule.name if rule.name in _BUILT_INS else rule) == "none"

    @classmethod
    def from_profile(
        cls,
        profile: str,
        *,
        enable: Iterable[str | Rule] = (),
        disable: Iterable[str] = (),
        title: Callable[[str], str] = identity,
    ) -> GuardChain:
        """The profile's rules with ``enable`` added (built-in names, or a program's gate and guard objects,
        which run after the built-in ones in the order given) and ``disable`` (names) removed.

        Example:
            >>> class NoShouting:
            ...     name, stream_form = "no_shouting", "end"  # judged on the whole reply: held to the end
            ...     def check(self, inp: GuardInput) -> GuardResult:
            ...         return GuardResult(inp.text.capitalize() if inp.text.isupper() else inp.text)
            >>> GuardChain.from_profile("endpoint", enable=[NoShouting()]).names
            ('model_not_found', 'relay', 'no_shouting')
        """
        enable = list(enable)
        names = profile_names(profile, [e for e in enable if isinstance(e, str)], disable)
        return cls(profile, [*names, *(e for e in enable if not isinstance(e, str))], title=title)

    def with_rules(self, *rules: Rule) -> GuardChain:
        """A new chain: this one's gates and guards, then ``rules`` (a program's own objects), with the same
        profile and titles (this chain is left as it is).

        Example:
            >>> class Polite:
            ...     name, stream_form = "polite", "end"
            ...     def check(self, inp: GuardInput) -> GuardResult:
            ...         return GuardResult(inp.text)
            >>> GuardChain.from_profile("off").with_rules(Polite()).describe()["enabled"]
            ['polite']
        """
        built_in = [r.name if r.name in _BUILT_INS else r for r in self.rules]
        return GuardChain(self.profile, [*built_in, *rules], title=self.title)

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

    def titles(self, sources: Sequence[Article]) -> list[str]:
        """The sources' titles as the answer prompt shows them."""
        return [self.title(s.title or s.kb_id) for s in as_articles(sources)]

    def gate(self, inp: GateInput, *, only: Sequence[str] | None = None) -> Fired | None:
        """The first gate (of ``only``, when given) that keeps the model from being asked, or None."""
        for gate in self.gates:
            if only is not None and gate.name not in only:
                continue
            reason = gate.check(inp)
            if reason is not None:
                return Fired(gate.name, reason)
        return None

    def review(self, question: str, text: str, sources: Sequence[Article]) -> Verdict:
        """Run the guards over the model's reply ``text``: the first that sets it aside as "not found" ends the
        run; the others clean it up in order."""
        articles = tuple(as_articles(sources))  # converted once: a dict is read (and warned about) only here
        inp = GuardInput(question, text.strip(), articles, tuple(self.titles(articles)))
        fired: list[Fired] = []
        for guard in self.guards:
            result = guard.check(inp)
            if result.reason is not None:
                fired.append(Fired(guard.name, result.reason))
            if result.not_found:
                told = getattr(guard, "tells_user", True)
                return Verdict(result.text, not_found=True, reason=result.reason if told else None, fired=fired)
            inp = GuardInput(question, result.text, articles, inp.titles)
        return Verdict(inp.text, fired=fired)

    def stream_filter(self, question: str = "") -> StreamFilter:
        """The incremental form of this chain, for a reply shown while it is written: it shows no text that the
        finished answer withdraws (:mod:`ragidx.agent.guards.stream`)."""
        not_found = next((g for g in self.guards if isinstance(g, ModelSaysNotFound)), None)
        entries = [r.name if r.name in _BUILT_INS else r for r in self.rules]  # a program's own by its form
        return StreamFilter(entries, title=self.title, question=question, not_found=not_found)
