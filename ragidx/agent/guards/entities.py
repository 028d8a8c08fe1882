"""HTML entities a model wrote for plain characters (``&gt;`` for ``>``): the local server's chat template shows
every article that way, and scraped articles hold some. Turned back into characters, in the answer and on the
stream.

Example:
    >>> restore_entities("Click the &gt;&gt; button.", [Article("a", "", "", "Click the >> button.")])
    'Click the >> button.'
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from ragidx.agent.guards.base import GuardInput, GuardResult
from ragidx.article import Article

_ENTITY = re.compile(r"&(?:gt|lt|amp|quot|apos|#39|#x27);")


def restore_entities(text: str, sources: Sequence[Article]) -> str:
    """``text`` with the HTML entities a model wrote for plain characters (``&gt;`` for ``>``) turned
    back into them; an entity that the articles shown also write (say, a page about HTML) is kept.

    Example:
        >>> restore_entities("Click the &gt;&gt; button.", [Article("b", "Buttons", "", "Click the >> button.")])
        'Click the >> button.'
    """
    found = set(_ENTITY.findall(text))
    if not found:
        return text
    kept = {e for e in found if any(e in s.content for s in sources)}
    return _ENTITY.sub(lambda m: m.group(0) if m.group(0) in kept else html.unescape(m.group(0)), text)


class EntityRestore:
    """Turns the HTML entities a model wrote back into characters (:func:`restore_entities`)."""

    name = "entities"

    def check(self, inp: GuardInput) -> GuardResult:
        restored = restore_entities(inp.text, inp.sources)
        if restored == inp.text:
            return GuardResult(inp.text)
        return GuardResult(restored, reason="HTML entities the model wrote were turned into characters")


class EntityUnescaper:
    """The stream's form of :class:`EntityRestore`: shows the characters of the entities a model writes; an
    entity split across two pieces of the stream is held back until it is complete.

    Example:
        >>> u = EntityUnescaper()
        >>> u.feed("Select &#3") + u.feed("4;Table&#34; &gt") + u.feed("> Insert") + u.flush()
        'Select "Table" >> Insert'
    """

    def __init__(self) -> None:
        self._pending = ""

    def feed(self, piece: str) -> str:
        text = self._pending + piece
        amp = text.rfind("&")
        if amp >= 0 and ";" not in text[amp:] and len(text) - amp <= 10 and not text[amp + 1 :].count(" "):
            self._pending, text = text[amp:], text[:amp]
        else:
            self._pending = ""
        return html.unescape(text)

    def flush(self) -> str:
        text, self._pending = self._pending, ""
        return html.unescape(text)
