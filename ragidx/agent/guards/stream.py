"""One incremental filter for a reply shown while it is written (``ragidx ask``, the dashboard's chat).

It applies, piece by piece, the text clean-ups of the guard profile that the finished answer gets: entities
shown as characters (``entities``), a copy of the source list after the answer held back and dropped
(``echoed_source_list``), closing sentences that only say where the answer was found held back and replaced by
their markers (``source_talk``), a sentence that relays instruction-like text from an article never shown
(``relay``: sentences are shown once complete). Each holds back only what may still change; everything else is
shown at once.

Example:
    >>> f = StreamFilter(["echoed_source_list", "source_talk", "entities"])
    >>> f.feed("Use Table &gt; Insert [1].\\n\\nSou") + f.feed("rces:\\n[1] Tables") + f.finish([{"title": "Tables"}])
    'Use Table > Insert [1].'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ragidx.agent.guards.echo import SOURCES_HEADING, SOURCES_WORDS, strip_echoed_sources
from ragidx.agent.guards.entities import EntityUnescaper
from ragidx.agent.guards.relay import RelayHold
from ragidx.agent.guards.source_talk import source_talk_units
from ragidx.sentences import split_units


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


class _Pass:
    def feed(self, piece: str) -> str:
        return piece

    def flush(self) -> str:
        return ""


class StreamFilter:
    """The stream's form of a guard profile's text clean-ups (see the module docstring).

    Args:
        names: the profile's guard names (``GuardChain.names``); those of them with a stream form apply.
        title: an article title as the answer prompt shows it.

    Example:
        >>> f = StreamFilter(["source_talk"])
        >>> f.feed("It is 4MB. This infor") + f.feed("mation is in article [1].") + f.finish([])
        'It is 4MB. [1]'
        >>> f.printed
        'It is 4MB. [1]'
    """

    def __init__(self, names: Iterable[str], *, title: Callable[[str], str] = lambda t: t) -> None:
        names = set(names)
        self._title = title
        self._entities: EntityUnescaper | _Pass = EntityUnescaper() if "entities" in names else _Pass()
        self._echo = _EchoHold() if "echoed_source_list" in names else None
        self._talk = _TalkHold() if "source_talk" in names else None
        self._relay = RelayHold() if "relay" in names else None
        self.printed = ""
        """Everything the filter has let through so far."""

    def show(self, titles: Sequence[str]) -> None:
        """The titles of the articles the answer's prompt shows (a progress item says them before the answer):
        a closing sentence that only names them is held back too."""
        if self._talk is not None:
            self._talk.titles = [self._title(t) for t in titles]

    def feed(self, piece: str) -> str:
        """What of ``piece`` (and of what was held before it) can be shown now."""
        return self._out(self._after_entities(self._entities.feed(piece)))

    def finish(self, sources: Sequence[dict[str, Any]]) -> str:
        """The rest, once the reply is complete; ``sources``: the articles shown (``Answer.articles``)."""
        text = self._after_entities(self._entities.flush())
        if self._echo is not None:
            titles = [self._title(str(s.get("title") or s.get("kb_id") or "")) for s in sources]
            text += self._talk_feed(self._echo.flush(titles))
        if self._talk is not None:
            talk = self._talk.flush()
            text += self._relay.feed(talk) if self._relay is not None else talk
        if self._relay is not None:
            text += self._relay.flush()
        return self._out(text)

    def _after_entities(self, text: str) -> str:
        return self._talk_feed(self._echo.feed(text) if self._echo is not None else text)

    def _talk_feed(self, text: str) -> str:
        text = self._talk.feed(text) if self._talk is not None else text
        return self._relay.feed(text) if self._relay is not None else text

    def _out(self, text: str) -> str:
        self.printed += text
        return text
