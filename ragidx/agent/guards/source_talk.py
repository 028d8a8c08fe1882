"""Sentences that only say where the answer was found ("This information is found in article [1]."): dropped,
their markers moved onto the sentence before. Also the incremental form a streaming reader holds back.

Example:
    >>> strip_source_talk("Choose Insert - Table. This information is found in article [2].")
    'Choose Insert - Table [2].'
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ragidx.agent.citations import ASKING, CITING, MARKER
from ragidx.agent.guards.base import GuardInput, GuardResult
from ragidx.sentences import split_units
from ragidx.terms import terms

# Where the model says it read something: "found in article [2] at line 108", "в статье [1] на странице 6". Its
# number points into a source (and is often made up); it is no value the answer states.
LOCATOR = re.compile(
    r"(?i)((?:\[\d{1,3}\]|\barticles?\b|\bsources?\b|\bстать\w*|\bисточник\w*)[^.!?\n]{0,30}?"
    r"\b(?:at|on|in|на|в)\s+(?:line|page|paragraph|строке|странице|абзаце)\s+)\d+"
)


# Words of a sentence that only says where its answer came from ("This can be confirmed by citing article [1].",
# "The source for this information is [2].", "Sources: [1]"), beside ``CITING`` and ``ASKING``.
_TALK = CITING | ASKING | frozenset(
    {
        "confirm", "confirmed", "seen", "cite", "citing", "taken", "derived", "based", "shown", "section", "line",
        "more", "further", "additional", "topic", "подробнее", "дополнительная", "теме",
        "paragraph", "result", "results", "search", "это", "эта", "этой", "этом", "данная", "данной", "можно",
        "найти", "найдена", "находится", "подтверждается", "взята", "взято", "разделе", "строке", "странице", "абзаце",
        "результатах", "поиска",
    }
)  # fmt: skip
_NAMES_SOURCE = re.compile(r"\[\d{1,3}\]|\b(?:articles?|sources?)\b|\bстать|\bисточник", re.I)


def strip_source_talk(text: str, titles: Sequence[str] = ()) -> str:
    """``text`` without the sentences that only say where the answer was found ("This information is found in
    article [1].", "This can be found in article [2] at line 108.", "Sources: [1]", or with ``titles``, those of the
    articles shown: 'This is in article [1] on "Saving Documents".'), their markers moved onto the sentence before
    them. A small model adds such a sentence to about one answer in ten; it says nothing, and the place it names
    ("at line 108", "on page 6") is usually made up. A sentence with any other word ("According to article [1],
    the default is 4MB.") stays, as does such a sentence when nothing comes before it.

    Example:
        >>> strip_source_talk("Choose Insert - Table. This information is found in article [2].")
        'Choose Insert - Table [2].'
        >>> strip_source_talk("It is 4MB [1]. The source for this information is [1] at line 12.")
        'It is 4MB [1].'
        >>> strip_source_talk("According to article [1], the default is 4MB.")
        'According to article [1], the default is 4MB.'
        >>> strip_source_talk('It is .BAK. This is in article [1] on "Saving Documents".', ["Saving Documents"])
        'It is .BAK [1].'
    """
    units = split_units(text)
    talking = _talkcontent_words(titles)
    talk = [i for i, u in enumerate(units) if i > 0 and _only_source_talk(u.text, talking)]
    if not talk:
        return text
    pieces, pos = [], 0
    for i in talk:
        pieces.append(text[pos : units[i - 1].end])  # "" when the sentence before was talk too
        pos = units[i].end
        markers = [f"[{m}]" for m in MARKER.findall(units[i].text)]
        if markers:  # onto the last sentence kept (the first sentence never is talk)
            last = max(n for n, piece in enumerate(pieces) if piece.strip())
            pieces[last] = with_markers(pieces[last], markers)
    pieces.append(text[pos:])
    return "".join(pieces)


def _talkcontent_words(titles: Sequence[str]) -> frozenset[str]:
    return _TALK.union(w for title in titles for w in re.findall(r"\w+", title.lower())) if titles else _TALK


def _only_source_talk(sentence: str, talking: frozenset[str] = _TALK) -> bool:
    """Whether ``sentence`` names a source and has no word beside ``talking`` ones (those that talk about sources)."""
    return bool(_NAMES_SOURCE.search(sentence)) and _talk_words_only(sentence, talking, complete=True)


def source_talk_units(text: str, *, finished: bool = False, titles: Sequence[str] = ()) -> tuple[int, list[str]]:
    """Where the sentences at the end of a reply that is still being written may turn out to be source talk
    (:func:`strip_source_talk` would drop them), and their markers: ``(len(text), [])`` when they cannot. Unless
    the reply is ``finished``, its last sentence may be too: its words so far must all be ones that talk about
    sources, its last word may be cut. A streaming reader holds that tail back (``ragidx ask``).

    Example:
        >>> source_talk_units("It is 4MB. This information is fou")
        (11, [])
        >>> source_talk_units("It is 4MB. This information is found in article [1].")
        (11, ['[1]'])
        >>> source_talk_units("It is 4MB. This tells Calc")
        (26, [])
    """
    units = split_units(text)
    talking = _talkcontent_words(titles)
    start = len(text)
    for i in range(len(units) - 1, 0, -1):
        last = i == len(units) - 1
        whole = finished or not last or bool(re.search(r"[.!?…]\s*$", text))
        sentence = units[i].text
        if not (_only_source_talk(sentence, talking) if whole else _talk_words_only(sentence, talking, complete=False)):
            break
        start = units[i].start
    return start, [f"[{m}]" for m in dict.fromkeys(MARKER.findall(text[start:]))]


def _talk_words_only(sentence: str, talking: frozenset[str], *, complete: bool) -> bool:
    """Whether every word of ``sentence`` (numbers where it says where it read something aside) talks about
    sources; with ``complete=False`` its last word may be cut and is not judged."""
    plain = MARKER.sub(" ", LOCATOR.sub(r"\1", sentence))
    found = [w for w in re.findall(r"\w+", plain.lower()) if not w.isdigit()]
    if not complete and found and re.search(r"\w$", plain):
        found = found[:-1]
    if not found:
        return not complete
    return not terms(" ".join(found), extra_stop_words=talking)


def with_markers(kept: str, markers: Sequence[str]) -> str:
    """``kept`` with those of ``markers`` its last sentence does not have, before that sentence's closing stop.

    Example:
        >>> with_markers("It is 4MB [2].", ["[1]", "[2]"])
        'It is 4MB [2] [1].'
    """
    units = split_units(kept)
    last = units[-1].text if units else ""
    new = [m for m in dict.fromkeys(markers) if m not in last]
    if not new:
        return kept
    body = kept.rstrip()
    stop = len(body) if body.endswith("]") else len(body.rstrip(".!?…"))
    return body[:stop] + " " + "".join(new) + body[stop:] + kept[len(body) :]


class SourceTalk:
    """Drops closing sentences that only say where the answer was found (:func:`strip_source_talk`).

    Example:
        >>> SourceTalk().check(GuardInput("q", "It is 4MB. This is found in article [1].", [])).text
        'It is 4MB [1].'
    """

    name = "source_talk"

    def check(self, inp: GuardInput) -> GuardResult:
        kept = strip_source_talk(inp.text, inp.shown_titles())
        if kept == inp.text:
            return GuardResult(inp.text)
        return GuardResult(kept, reason="a sentence that only said where the answer was found was dropped")
