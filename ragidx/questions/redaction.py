"""Personal data out of text before the question log stores it: each e-mail address, phone number, card-like
number, long digit run and key- or token-like string becomes a placeholder (``[email]``, ``[phone]``, ``[card]``,
``[number]``, ``[key]``, ``[token]``), and each match of a team's own patterns ``[redacted]``.

What is matched, in this order (each later rule sees the placeholders of the earlier ones, never the text they hid):

1. the team's own patterns (``questions.redact_patterns``), on the text as written;
2. keys with a known shape: OpenAI ``sk-...``, Stripe ``sk_live_...``, AWS ``AKIA...``/``ASIA...``, GitHub
   ``ghp_...``/``github_pat_...``, GitLab ``glpat-...``, Slack ``xox?-...``, Google ``AIza...``; JSON web tokens
   (``eyJ...``.``...``.``...``);
3. e-mail addresses;
4. any run of 32 or more hex digits, or of 32 or more base64 characters holding upper case, lower case and digits
   (random secrets do; words, paths and version strings don't): ``[token]``;
5. runs of 13 to 19 digits (spaces or hyphens between groups): ``[card]`` when they pass the Luhn check, as
   every card number does, else ``[number]``;
6. phone numbers: 7 to 15 digits with a leading ``+`` or separators between groups (spaces, dots, hyphens,
   parentheses), except what reads as a date (``2024-01-15``, ``15.01.2024``) or a version (``1.2.3``);
7. any other run of 8 or more digits (account, order and ID numbers, a card that fails the Luhn check).

Why placeholders rather than deletion: a reader of the log still sees that a question named an address or a
number, which says what was asked ("why was my card [card] declined?") without who asked it.

Example:
    >>> Redactor().redact("I am ann@example.com, call +44 20 7946 0958, card 4111 1111 1111 1111")
    'I am [email], call [phone], card [card]'
    >>> Redactor(["CUST-\\\\d+"]).redact("order CUST-42 for key sk-abcdefghijklmnopqrstuvwx")
    'order [redacted] for key [key]'
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

__all__ = ["PLACEHOLDERS", "Redactor", "compile_patterns", "luhn_valid"]

PLACEHOLDERS = ("[email]", "[phone]", "[card]", "[number]", "[key]", "[token]", "[redacted]")
"""What redaction writes in place of what it removed."""

_KEYS = re.compile(
    r"(?<![A-Za-z0-9])(?:"
    r"sk-(?:proj-|ant-)?[A-Za-z0-9_-]{16,}"
    r"|(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{10,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}"
    r"|glpat-[A-Za-z0-9_-]{20,}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"
    r"|AIza[0-9A-Za-z_-]{30,}"
    r")"
)
_JWT = re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
_HEX = re.compile(r"(?<![0-9A-Za-z])[0-9A-Fa-f]{32,}(?![0-9A-Za-z])")
_BASE64 = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{32,}={0,2}")
_EMAIL = re.compile(r"[\w.!#$%&'*+/=?^`{|}~-]+@[\w-]+(?:\.[\w-]+)*\.[^\W\d_]{2,}")
_CARD = re.compile(r"(?<![\d])\d(?:[ -]?\d){12,18}(?![\d])")
_PHONE = re.compile(r"(?<![\w+])(?:\+|00)?\(?\d[\d().\s/-]{5,}\d(?![\w])")
_LONG_DIGITS = re.compile(r"\d{8,}")
_DATE = re.compile(r"\d{4}[-/.]\d{1,2}[-/.]\d{1,2}|\d{1,2}[-/.]\d{1,2}[-/.]\d{2,4}")
_VERSION = re.compile(r"\d{1,3}(?:\.\d{1,3})+")
_PARTS = re.compile(r"[@\s]+")


def luhn_valid(digits: str) -> bool:
    """Whether a string of digits passes the Luhn check every payment card number passes.

    Example:
        >>> luhn_valid("4111111111111111"), luhn_valid("4111111111111112")
        (True, False)
    """
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def compile_patterns(patterns: Sequence[str]) -> tuple[re.Pattern[str], ...]:
    """The team's own patterns, compiled.

    Raises:
        ValueError: a pattern is not a regular expression, or matches the empty string (it would redact nothing
            and loop on every position); the message names the pattern and what to fix.
    """
    compiled = []
    for pattern in patterns:
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"redact pattern {pattern!r} is no regular expression ({exc}); fix or remove it") from None
        if regex.fullmatch(""):
            raise ValueError(f"redact pattern {pattern!r} matches empty text; make it match at least one character")
        compiled.append(regex)
    return tuple(compiled)


class Redactor:
    """Replaces personal data in text with placeholders (see the module's docstring for what is matched).

    Args:
        patterns: the team's own regular expressions; each match becomes ``[redacted]``.

    Example:
        >>> Redactor().redact("token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl please")
        'token [key] please'
    """

    def __init__(self, patterns: Sequence[str] = ()) -> None:
        self.patterns = compile_patterns(patterns)

    def redact(self, text: str, *, hiding: Sequence[str] = ()) -> str:
        """``text`` with every match replaced by its placeholder (``redact(redact(t)) == redact(t)``).

        ``hiding``: what the redaction of another text removed (:meth:`hidden`); each of its parts of four or more
        characters is removed from ``text`` too. A reason derived from a question ("no article found mentions
        example.com") then keeps nothing of the address the question's redaction hid.
        """
        for secret in hiding:
            for part in sorted({secret, *_PARTS.split(secret)}, key=len, reverse=True):
                if len(part) >= 4:
                    text = text.replace(part, "[redacted]")
        return self._run(text, None)

    def hidden(self, text: str) -> list[str]:
        """What :meth:`redact` would remove from ``text``, as written there."""
        found: list[str] = []
        self._run(text, found)
        return found

    __call__ = redact

    def _run(self, text: str, found: list[str] | None) -> str:
        def sub(regex: re.Pattern[str], replace: Callable[[re.Match[str]], str], text: str) -> str:
            def one(match: re.Match[str]) -> str:
                out = replace(match)
                if found is not None and out != match.group():
                    found.append(match.group())
                return out

            return regex.sub(one, text)

        for regex in self.patterns:
            text = sub(regex, _fixed("[redacted]"), text)
        text = sub(_KEYS, _fixed("[key]"), text)
        text = sub(_JWT, _fixed("[key]"), text)
        text = sub(_EMAIL, _fixed("[email]"), text)
        text = sub(_HEX, _fixed("[token]"), text)
        text = sub(_BASE64, _base64, text)
        text = sub(_CARD, _card, text)
        text = sub(_PHONE, _phone, text)
        return sub(_LONG_DIGITS, _fixed("[number]"), text)


def _fixed(placeholder: str) -> Callable[[re.Match[str]], str]:
    return lambda _match: placeholder


def _base64(match: re.Match[str]) -> str:
    run = match.group()
    random_like = any(c.isdigit() for c in run) and any(c.isupper() for c in run) and any(c.islower() for c in run)
    return "[token]" if random_like else run


def _card(match: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", match.group())
    return "[card]" if luhn_valid(digits) else "[number]"


def _phone(match: re.Match[str]) -> str:
    run = match.group()
    digits = sum(c.isdigit() for c in run)
    if not 7 <= digits <= 15:
        return run
    if run.startswith(("+", "00")):
        return "[phone]"
    if _DATE.fullmatch(run) or _VERSION.fullmatch(run) or not re.search(r"[\s().-]", run):
        return run
    return "[phone]"
