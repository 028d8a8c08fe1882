"""One incremental filter for a reply shown while it is written: every surface that streams an answer (``ragidx
ask``, ``ragidx serve``'s server-sent events, the dashboard's chat, the LlamaIndex chat and query engines) shows
what it lets through, because ``Engine.stream_ask`` yields nothing else.

Its promise: **no text is shown that the finished answer withdraws.** Two kinds of hold keep it:

- the verdict hold, first: a guard that may set the whole reply aside as "not found" holds it until it can no
  longer do so. ``model_not_found`` decides on the reply's opening (its first sentence, or a citation marker where
  a cited reply counts as an answer), so the rest streams as it is written; the guards that judge the whole reply
  (``source_list_only``, ``article_copy``, ``ungrounded_*``: :data:`DECIDES_AT_END`) hold it to the end, and the
  finished answer is shown at once. Every guard name has its stream form in :data:`STREAM_FORMS`; a test keeps a
  new guard from joining a profile without one. A program's own guard declares its ``stream_form`` (``end``,
  ``clean-up`` with a ``stream_hold()``, or ``none`` for a gate) and is refused without one (:func:`stream_form_of`).
- the clean-up holds, after it, apply piece by piece the text clean-ups that the finished answer gets: entities
  shown as characters (``entities``), a copy of the source list after the answer held back and dropped
  (``echoed_source_list``), closing sentences that only say where the answer was found held back and replaced by
  their markers (``source_talk``), a sentence that relays instruction-like text from an article never shown
  (``relay``: a sentence is shown once it is complete and the words after it cannot make it part of a quoted
  prompt). Each holds back only what may still change; everything else is shown at once.

:meth:`StreamFilter.finish` gets the finished ``Answer`` and returns what completes the screen: the rest of the
answer as it stands (its relay note, say), or the whole answer when nothing was shown yet (a reply held to the
end, set aside, or never asked for), or, when the answer's citations were renumbered against the articles, the
answer again under a line that says so.

Example:
    >>> f = StreamFilter(["echoed_source_list", "source_talk", "entities"])
    >>> f.feed("Use Table &gt; Insert [1].\\n\\nSou") + f.feed("rces:\\n[1] Tables")
    'Use Table > Insert [1].'
    >>> from ragidx.agent.answer import Answer
    >>> f.finish(Answer(question="q", text="Use Table > Insert [1].", articles=[{"title": "Tables"}]))
    ''
    >>> held = StreamFilter(["model_not_found"])
    >>> held.feed("The articles do not say")  # may still become "not found": nothing shown
    ''
    >>> held.finish(Answer(question="q", text="I could not find it.", not_found=True))
    'I could not find it.'
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

from ragidx.agent.citations import MARKER
from ragidx.agent.guards.echo import SOURCES_HEADING, SOURCES_WORDS, strip_echoed_sources
from ragidx.agent.guards.entities import EntityUnescaper
from ragidx.agent.guards.not_found import NOT_FOUND_START, NOT_FOUND_TOKEN, SAYS_NOT_ANSWERED, ModelSaysNotFound
from ragidx.agent.guards.relay import RelayHold
from ragidx.agent.guards.source_talk import source_talk_units
from ragidx.sentences import split_units

if TYPE_CHECKING:
    from ragidx.agent.answer import Answer

StreamForm = Literal["clean-up", "opening", "end", "none"]
STREAM_FORMS: dict[str, StreamForm] = {
    "model_not_found": "opening",
    "echoed_source_list": "clean-up",
    "source_list_only": "end",
    "article_copy": "end",
    "ungrounded_numbers": "end",
    "ungrounded_shortcuts": "end",
    "ungrounded_names": "end",
    "source_talk": "clean-up",
    "entities": "clean-up",
    "relay": "clean-up",
    "shares_terms": "none",
    "missing_identifiers": "none",
    "answer_check": "none",
}
"""How each gate and guard acts on a streamed reply: ``opening``, it may set the reply aside until its opening
decides; ``end``, it may set it aside until the reply is complete (the reply is held to the end); ``clean-up``, it
changes text piece by piece; ``none``, it runs before the model writes (a gate)."""
DECIDES_AT_END = frozenset(n for n, form in STREAM_FORMS.items() if form == "end")
USER_STREAM_FORMS: tuple[StreamForm, ...] = ("end", "clean-up", "none")
"""The stream forms a program's own gate or guard may declare (``opening`` is ``model_not_found``'s alone: its hold
reads the reply's opening with that guard's rule)."""


class StreamHold(Protocol):
    """The incremental form of a ``clean-up`` guard: ``feed`` returns what of the text so far may be shown now
    (what the guard may still change is held back), ``flush`` the rest once the reply is complete."""

    def feed(self, piece: str) -> str: ...

    def flush(self) -> str: ...


def stream_form_of(rule: object) -> StreamForm:
    """How a gate or guard acts on a stream: a built-in one's (by name) from :data:`STREAM_FORMS`, a program's own
    from its ``stream_form`` attribute (one of :data:`USER_STREAM_FORMS`; a ``clean-up`` gives ``stream_hold()``).

    Raises:
        ValueError: no stream form, or one a program's guard cannot have; the message says what to declare.

    Example:
        >>> stream_form_of("relay")
        'clean-up'
        >>> class Polite:
        ...     name = "polite"
        >>> stream_form_of(Polite())  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: guard 'polite' declares no stream form: give it stream_form = 'end' (a stream holds the reply ...
    """
    if isinstance(rule, str):
        if rule not in STREAM_FORMS:
            raise ValueError(f"no stream form for guard {rule!r}: add it to STREAM_FORMS")
        return STREAM_FORMS[rule]
    name = getattr(rule, "name", type(rule).__name__)
    form = getattr(rule, "stream_form", None)
    if form is None:
        raise ValueError(
            f"guard {name!r} declares no stream form: give it stream_form = 'end' (a stream holds the reply until "
            "it is complete), 'clean-up' (with stream_hold()) or 'none' (a gate)"
        )
    if form not in USER_STREAM_FORMS:
        raise ValueError(
            f"guard {name!r} declares stream_form {form!r}: use 'end', 'clean-up' or 'none' ('opening' is the "
            "built-in model_not_found's; declare 'end' to have the reply held until it is complete)"
        )
    if form == "clean-up" and not callable(getattr(rule, "stream_hold", None)):
        raise ValueError(
            f"guard {name!r} is a 'clean-up' without stream_hold(): give it one (an object with feed(piece) and "
            "flush(), holding back what it may still change), or declare stream_form = 'end'"
        )
    return cast(StreamForm, form)


_OPENING = re.compile(r"^\W*")
_SENTENCE_END = re.compile(r"[.!?]\s|\n")  # the first sentence ends here (the rule of split_not_found)
_TOKEN_FORMING = re.compile(r"\s*\b(?:NOT_FOUND[.!]?|N(?:O(?:T(?:_(?:F(?:O(?:U(?:N)?)?)?)?)?)?)?)$")


class _Hold:
    """Text streamed so far and how much of it is on screen: a hold prints up to where it may still change."""

    def __init__(self) -> None:
        self._text = ""
        self._shown = 0

    def _emit(self, end: int) -> str:
        end = max(end, self._shown)
        out, self._shown = self._text[self._shown : end], end
        return out


class _EchoHold(_Hold):
    """Holds back a line that may open a copy of the prompt's source list ("Sources:" and what follows), and at
    the end shows it only if it was not one (:func:`strip_echoed_sources` decides, as for the answer's text)."""

    def __init__(self) -> None:
        super().__init__()
        self._hold_at: int | None = None

    def feed(self, piece: str) -> str:
        self._text += piece
        if self._hold_at is None:
            line_start = self._text.rfind("\n") + 1
            heading = SOURCES_HEADING.search(self._text, self._shown, line_start)
            if heading is not None:
                self._hold_at = len(self._text[: heading.start()].rstrip())  # with the blank lines before it
            else:
                line = self._text[line_start:].strip().lstrip("*").casefold()
                openings = (f"{word}:" for word in SOURCES_WORDS)
                could_open = bool(line) and any(o.startswith(line) or line.startswith(o) for o in openings)
                # trailing blank lines wait for the next words: they may come before a copied list
                return self._emit(len((self._text[:line_start] if could_open else self._text).rstrip()))
        return self._emit(self._hold_at)

    def flush(self, titles: Sequence[str]) -> str:
        kept = strip_echoed_sources(self._text, titles)
        return self._emit(len(kept) if len(kept) < len(self._text) else len(self._text))


class _TalkHold(_Hold):
    """Holds back closing sentences that may only say where the answer was found ("This information is found
    in article [1]."): the answer drops them and moves their markers onto the statement before, so at the end
    only those markers are shown in their place."""

    def __init__(self) -> None:
        super().__init__()
        self.titles: Sequence[str] = ()  # of the articles the model was shown

    def feed(self, piece: str) -> str:
        self._text += piece
        start, _ = source_talk_units(self._text, titles=self.titles)
        return self._emit(len(self._text[:start].rstrip()) if start < len(self._text) else start)

    def flush(self) -> str:
        start, markers = source_talk_units(self._text, finished=True, titles=self.titles)
        if start < len(self._text):
            shown = self._text[: self._shown]
            last = ([""] + [u.text for u in split_units(shown)])[-1]
            new = "".join(m for m in markers if m not in last)  # the shown stop stays where it is
            self._text = shown + (f" {new}" if new else "")
        return self._emit(len(self._text))


class _VerdictHold(_Hold):
    """Holds the reply while a guard may still set all of it aside as "not found" (see the module docstring); once
    none can, lets it through, without the stray ``NOT_FOUND`` tokens that the answer drops.

    Args:
        to_end: a guard of the profile judges the whole reply: nothing is let through before the answer.
        not_found: the profile's ``model_not_found`` guard, which decides on the reply's opening, or None.
    """

    def __init__(self, *, to_end: bool, not_found: ModelSaysNotFound | None) -> None:
        super().__init__()
        self._to_end = to_end
        self._not_found = not_found
        self._open = not to_end and not_found is None

    def feed(self, piece: str) -> str:
        self._text += piece
        if not self._open:
            if self._to_end or not self._is_answer():
                return ""
            self._open = True
        return self._let_through(self._stray_token_start())

    def flush(self) -> str:
        """The rest, once the answer is an answer (the caller knows: ``Answer.not_found``)."""
        return self._let_through(len(self._text))

    def _let_through(self, end: int) -> str:
        out = self._emit(end)
        return NOT_FOUND_TOKEN.sub("", out) if self._not_found is not None else out

    def _stray_token_start(self) -> int:
        """Where a ``NOT_FOUND`` token, or the start of one, may be forming at the end (the answer drops such a
        token with the full stop after it); the end of the text when none is."""
        if self._not_found is None:
            return len(self._text)
        tail = _TOKEN_FORMING.search(self._text)
        return tail.start() if tail is not None else len(self._text)

    def _is_answer(self) -> bool:
        """Whether the reply so far can no longer be "not found" (:func:`split_not_found`): its opening is neither
        ``NOT_FOUND`` nor a first sentence that declines (or, where a cited reply is an answer, it cites)."""
        assert self._not_found is not None
        stripped = self._text.lstrip()
        opening = _OPENING.sub("", stripped)
        if not opening or "NOT_FOUND".startswith(opening[:9]) or "not found".startswith(opening[:9].casefold()):
            return False  # NOT_FOUND / "not found", or on its way to being one
        if NOT_FOUND_START.match(stripped):
            return False
        if self._not_found.cited_is_answer and MARKER.search(stripped):
            return True
        first_end = _SENTENCE_END.search(stripped)
        if first_end is None:
            return False  # the first sentence is not complete yet
        return SAYS_NOT_ANSWERED.search(stripped[: first_end.end()]) is None


class _Pass:
    def feed(self, piece: str) -> str:
        return piece

    def flush(self) -> str:
        return ""


class StreamFilter:
    """The stream's form of a guard profile: its verdict hold and its text clean-ups (see the module docstring).

    Args:
        names: the profile's gates and guards: built-in ones by name, a program's own as objects (their declared
            ``stream_form``: ``end`` holds the reply to the end, ``clean-up`` feeds their ``stream_hold()`` after
            the built-in clean-ups, ``none`` is a gate). Each must have a stream form (:func:`stream_form_of`).
        title: an article title as the answer prompt shows it.
        question: the question asked (instruction-like words it holds itself are not a relay).
        not_found: the profile's ``model_not_found`` guard, when ``names`` has it (its own settings decide when a
            reply is an answer); by default one with the default settings.

    Example:
        >>> f = StreamFilter(["source_talk"])
        >>> f.feed("It is 4MB. This infor") + f.feed("mation is in article [1].")
        'It is 4MB.'
        >>> from ragidx.agent.answer import Answer
        >>> f.finish(Answer(question="q", text="It is 4MB. [1]"))
        ' [1]'
        >>> f.printed
        'It is 4MB. [1]'
    """

    def __init__(
        self,
        names: Iterable[object],
        *,
        title: Callable[[str], str] = lambda t: t,
        question: str = "",
        not_found: ModelSaysNotFound | None = None,
    ) -> None:
        entries = list(names)
        forms = [stream_form_of(entry) for entry in entries]  # a rule without one is refused here
        names = {entry for entry in entries if isinstance(entry, str)}
        rules: list[tuple[Any, StreamForm]] = [
            (entry, form) for entry, form in zip(entries, forms, strict=True) if not isinstance(entry, str)
        ]
        self._title = title
        if "model_not_found" in names and not_found is None:
            not_found = ModelSaysNotFound()
        to_end = bool(names & DECIDES_AT_END) or any(form == "end" for _, form in rules)
        self._verdict = _VerdictHold(to_end=to_end, not_found=not_found if "model_not_found" in names else None)
        self._entities: EntityUnescaper | _Pass = EntityUnescaper() if "entities" in names else _Pass()
        self._echo = _EchoHold() if "echoed_source_list" in names else None
        self._talk = _TalkHold() if "source_talk" in names else None
        self._relay = RelayHold(question) if "relay" in names else None
        self._holds: list[StreamHold] = [rule.stream_hold() for rule, form in rules if form == "clean-up"]
        self.printed = ""
        """Everything the filter has let through so far."""

    def show(self, titles: Sequence[str]) -> None:
        """The titles of the articles the answer's prompt shows (a progress item says them before the answer):
        a closing sentence that only names them is held back too."""
        if self._talk is not None:
            self._talk.titles = [self._title(t) for t in titles]

    def feed(self, piece: str) -> str:
        """What of ``piece`` (and of what was held before it) can be shown now."""
        return self._out(self._cleaned(self._verdict.feed(piece)))

    def finish(self, answer: Answer) -> str:
        """What completes the screen once the reply is complete and checked (see the module docstring)."""
        if not self.printed.strip():
            return self._out(answer.text)  # nothing was shown: the answer as it stands
        if answer.not_found:
            # The verdict hold keeps this from happening (a reply on screen is an answer); should a guard's stream
            # form be wrong, the user is told rather than left with text the answer withdrew.
            why = f": {answer.not_found_reason}" if answer.not_found_reason else ""
            return self._out(f"\n\nThis reply is not an answer from the knowledge base{why}.\n{answer.text}")
        rest = self._release(answer.articles)
        tail = _continuation(self.printed + rest, answer.text)
        if tail is None:  # e.g. a [n] moved to the article that holds its statement (ragidx.agent.citations)
            tail = f"\n\nWith its citations checked against the articles shown:\n{answer.text}"
        return self._out(rest + tail)

    def _release(self, sources: Sequence[dict[str, Any]]) -> str:
        """Everything still held, through the clean-ups (``sources``: the articles shown, as ``Answer.articles``
        writes them)."""
        text = self._cleaned(self._verdict.flush())
        text += self._after_entities(self._entities.flush())
        if self._echo is not None:
            titles = [self._title(str(s.get("title") or s.get("kb_id") or "")) for s in sources]
            text += self._talk_feed(self._echo.flush(titles))
        if self._talk is not None:
            talk = self._talk.flush()
            text += self._own_feed(self._relay.feed(talk) if self._relay is not None else talk)
        if self._relay is not None:
            text += self._own_feed(self._relay.flush())
        for at, hold in enumerate(self._holds):  # each program's clean-up lets go, through those after it
            text += self._own_feed(hold.flush(), start=at + 1)
        return text

    def _cleaned(self, text: str) -> str:
        return self._after_entities(self._entities.feed(text)) if text else ""

    def _after_entities(self, text: str) -> str:
        return self._talk_feed(self._echo.feed(text) if self._echo is not None else text)

    def _talk_feed(self, text: str) -> str:
        text = self._talk.feed(text) if self._talk is not None else text
        return self._own_feed(self._relay.feed(text) if self._relay is not None else text)

    def _own_feed(self, text: str, start: int = 0) -> str:
        """``text`` through the clean-up holds of a program's own guards (from the ``start``-th), in order."""
        for hold in self._holds[start:]:
            text = hold.feed(text)
        return text

    def _out(self, text: str) -> str:
        self.printed += text
        return text


def _continuation(shown: str, full: str) -> str | None:
    """The part of ``full`` after ``shown``, when ``shown`` is how ``full`` begins (whitespace aside); else None.

    Example:
        >>> _continuation("It is 4MB [1].", "It is 4MB [1].\\n\\nNote: a sentence was removed.")
        '\\n\\nNote: a sentence was removed.'
        >>> _continuation("It is 4MB [2].", "It is 4MB [1].") is None
        True
    """
    i = 0
    for ch in shown:
        if ch.isspace():
            continue
        while i < len(full) and full[i].isspace():
            i += 1
        if i >= len(full) or full[i] != ch:
            return None
        i += 1
    return full[i:]
