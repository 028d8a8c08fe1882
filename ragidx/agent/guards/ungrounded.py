"""Values and names a reply states that no article shown writes: numbers, key combinations, product names.
A reply that states them was not read from the articles; a small model writes them from memory.

Example:
    >>> ungrounded_numbers("It is 65,536 rows [1].", [Article("a", "", "", "Rows and columns.")])
    ['65536']
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from ragidx.agent.citations import LIST_NUMBER, MARKER, shown_text
from ragidx.agent.guards.base import GuardInput, GuardResult
from ragidx.agent.guards.source_talk import LOCATOR
from ragidx.article import Article

_NUMBER = re.compile(r"(?<![\w.,])\d+(?:[.,]\d+)*")


def ungrounded_numbers(answer: str, sources: Sequence[Article], question: str = "") -> list[str]:
    """The numbers an answer states when **none** of them occurs in the sources or the question, else ``[]``.

    Such an answer was not read from the articles: asked for "the maximum number of rows in a Calc sheet"
    over articles that never give it, a small model writes "65,536" from memory. One number the articles
    do write is enough to trust the rest (conversions, counts). ``[n]`` markers, a numbered list's "1.", the
    digits of an HTML entity a model wrote (``&#34;``) and where the model says it read something ("article
    [2] at line 108": the local model added that to a right PostgreSQL answer) are not numbers it states.

    Example:
        >>> ungrounded_numbers("It is 65,536 rows [1].", [Article("a", "", "", "Rows and columns.")])
        ['65536']
        >>> ungrounded_numbers("128MB, that is 131072 kB [1].", [Article("a", "", "", "default 128MB")])
        []
        >>> shown = [Article("a", "", "", "Help - About")]
        >>> ungrounded_numbers("1. Choose Help - About.\\n2. Read the version [1].", shown)
        []
        >>> ungrounded_numbers("It is WARNING, as article [2] says at line 108.", [Article("a", "", "", "WARNING")])
        []
    """
    plain = LIST_NUMBER.sub(r"\1", MARKER.sub(" ", LOCATOR.sub(r"\1", html.unescape(answer))))
    stated = dict.fromkeys(n.replace(",", "") for n in _NUMBER.findall(plain))
    if not stated:
        return []
    seen = shown_text(sources, question)
    known = {n.replace(",", "") for n in _NUMBER.findall(seen)}
    return [] if any(n in known for n in stated) else list(stated)


_MODIFIER = r"(?:commandctrl|optionalt|ctrl|control|command|cmd|option|alt|altgr|shift|fn)"
_KEY = r"(?:f\d{1,2}|enter|return|tab|space|spacebar|esc|escape|backspace|del|delete|ins|insert|home|end|[a-z0-9])"
# "Ctrl+Shift+Enter", "Command + Option + V", "CommandCtrl+F12": a modifier, then "+" and keys.
_SHORTCUT = re.compile(rf"(?i)(?<![\w+]){_MODIFIER}(?:\s*\+\s*(?:{_MODIFIER}|{_KEY}))+(?![\w+])")


def ungrounded_shortcuts(answer: str, sources: Sequence[Article], question: str = "") -> list[str]:
    """The key combinations an answer states when **none** of them is written in the sources or the question
    (spaces aside, case-insensitively), else ``[]``: a help centre's values are its shortcuts as much as its
    numbers. Asked which shortcut starts voice dictation, over pages that list other shortcuts, a small model
    answers "Command + Option + V".

    Example:
        >>> shown = [Article("a", "", "", "Command+Option+F10 docks it.")]
        >>> ungrounded_shortcuts("Press Command + Option + V [1].", shown)
        ['Command + Option + V']
        >>> shown = [Article("a", "", "", "CommandCtrl+Shift+F10 docks.")]
        >>> ungrounded_shortcuts("Press Command + Shift + F10 [1].", shown)
        []
    """
    stated = list(dict.fromkeys(m.group(0) for m in _SHORTCUT.finditer(answer)))
    if not stated:
        return []
    seen = _keys(shown_text(sources, question))
    return [] if any(_keys(k) in seen for k in stated) else stated


_PLATFORM_KEYS = (
    (re.compile(r"commandctrl|command|cmd|control|ctrl"), "ctrl"),
    (re.compile(r"optionalt|option|alt"), "alt"),
)


def _keys(text: str) -> str:
    """``text`` lower-cased without spaces, with each platform's name of a modifier made one: LibreOffice's
    help writes "CommandCtrl+Shift+F10" for what a model may write "Command + Shift + F10" or "Ctrl+Shift+F10"."""
    text = re.sub(r"\s+", "", text.lower())
    for names, key in _PLATFORM_KEYS:
        text = names.sub(key, text)
    return text


# A capitalized name inside a sentence (after a lower-case word or a comma): "Google Sheets", "Excel".
_NAME = re.compile(r"(?<=[a-zа-яё,;:] )([A-Z][A-Za-z]{2,}(?:\s+[A-Z][A-Za-z]+)*)")


def ungrounded_names(answer: str, sources: Sequence[Article], question: str = "", *, min_names: int = 2) -> list[str]:
    """The names an answer writes inside its sentences that neither the sources nor the question write, when
    there are at least ``min_names`` of them, else ``[]``.

    Asked how to co-edit a sheet in real time through the cloud, over help pages that never mention it, a small
    model recommends "Google Sheets", "Microsoft Excel", "Tableau" and "Snowflake" from memory. One such name
    is not enough: a right answer may compare with a product the articles do not name ("unlike Excel").

    Example:
        >>> ungrounded_names("Use Google Sheets, or try Microsoft Excel.", [Article("a", "", "", "Share a document.")])
        ['Google Sheets', 'Microsoft Excel']
        >>> ungrounded_names("Unlike in Excel, choose Data - Filter.", [Article("a", "", "", "Choose Data - Filter.")])
        []
        >>> shown = [Article("a", "", "", "Save a file.")]
        >>> ungrounded_names("Open it in Microsoft Excel, then save it in Excel.", shown)
        []
    """
    seen = shown_text(sources, question).lower()
    found = dict.fromkeys(
        name
        for name in _NAME.findall(html.unescape(answer))
        if name.lower() not in seen and all(word.lower() not in seen for word in name.split())
    )
    # "Excel" after "Microsoft Excel" is the same name
    names = [n for n in found if not any(n != other and n in other.split() for other in found)]
    return names if len(names) >= min_names else []


class _Ungrounded:
    name = ""

    def find(self, inp: GuardInput) -> list[str]:
        raise NotImplementedError

    def check(self, inp: GuardInput) -> GuardResult:
        invented = self.find(inp)
        if not invented:
            return GuardResult(inp.text)
        reason = f"the model's reply states {', '.join(invented)}, which no article shown writes"
        return GuardResult(inp.text, not_found=True, reason=reason)


class UngroundedNumbers(_Ungrounded):
    """Sets aside a reply whose numbers none of the articles shown writes (:func:`ungrounded_numbers`).

    Example:
        >>> shown = [Article("a", "", "", "Rows.")]
        >>> UngroundedNumbers().check(GuardInput("q", "It is 65,536 rows [1].", shown)).not_found
        True
    """

    name = "ungrounded_numbers"

    def find(self, inp: GuardInput) -> list[str]:
        return ungrounded_numbers(inp.text, inp.sources, inp.question)


class UngroundedShortcuts(_Ungrounded):
    """Sets aside a reply whose key combinations none of the articles shown writes (:func:`ungrounded_shortcuts`)."""

    name = "ungrounded_shortcuts"

    def find(self, inp: GuardInput) -> list[str]:
        return ungrounded_shortcuts(inp.text, inp.sources, inp.question)


class UngroundedNames(_Ungrounded):
    """Sets aside a reply naming two or more products or terms no article shown writes (:func:`ungrounded_names`)."""

    name = "ungrounded_names"

    def find(self, inp: GuardInput) -> list[str]:
        return ungrounded_names(inp.text, inp.sources, inp.question)
