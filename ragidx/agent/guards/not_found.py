"""The one reading of "the model found no answer": used by the agent and by ``ragidx eval answers``.

A reply is "not found" when it opens with ``NOT_FOUND`` / "not found", or when its first sentence says that the
articles do not answer ("The articles do not mention …", "В статьях нет информации …", "I don't know."). A stray
``NOT_FOUND`` after a real answer is dropped and the answer kept. With ``cited_is_answer`` a reply that cites an
article (``[n]``) anywhere is an answer whatever its first sentence says: strong models open a right answer
with a hedge ("The page does not state it directly, but the default is 128MB [1].") and do not cite a refusal.

Example:
    >>> split_not_found("Use Table > Insert Table [1].\\n\\nNOT_FOUND")
    (False, 'Use Table > Insert Table [1].')
    >>> says_not_found("The articles do not say. It is 4MB [1].")
    True
    >>> says_not_found("The articles do not say. It is 4MB [1].", cited_is_answer=True)
    False
"""

from __future__ import annotations

import re

from ragidx.agent.citations import MARKER
from ragidx.agent.guards.base import GuardInput, GuardResult

NOT_FOUND_START = re.compile(r"^\W*(?:NOT_FOUND|(?i:not found)\b)")
SAYS_NOT_ANSWERED = re.compile(
    r"(?i)\b(?:(?:do|does|did)(?: not|n't) (?:contain|mention|provide|include|specify|say|state|cover|answer|"
    r"discuss|give|describe)|(?:is|are) not (?:mentioned|specified|provided|given|stated|covered)|"
    r"no (?:relevant )?(?:information|mention|details)|(?:cannot|can't|can not|could not|couldn't|unable to) "
    r"(?:be found|be determined|find|determine|answer)|i (?:do not|don't) know)"
    r"|(?:не (?:содерж|упомина|указ|привод|говор|сказан)|нет (?:информации|сведений|данных|ответа))"
)
"""A first sentence that says the articles do not answer, in English or Russian."""
_FIRST_SENTENCE = re.compile(r"^.*?(?:[.!?](?:\s|$)|\n|$)", re.S)
NOT_FOUND_TOKEN = re.compile(r"\s*\bNOT_FOUND\b[.!]?")


def split_not_found(text: str, *, cited_is_answer: bool = False) -> tuple[bool, str]:
    """(the model said it found nothing, the reply without stray NOT_FOUND tokens).

    Example:
        >>> split_not_found("  Not found.")
        (True, '')
    """
    stripped = text.strip()
    if NOT_FOUND_START.match(stripped):
        return True, ""
    first = _FIRST_SENTENCE.match(stripped)
    declines = bool(first and SAYS_NOT_ANSWERED.search(first.group(0)))
    if declines and not (cited_is_answer and MARKER.search(stripped)):
        return True, ""
    cleaned = NOT_FOUND_TOKEN.sub("", stripped).strip()
    return not cleaned, cleaned


def says_not_found(text: str, *, cited_is_answer: bool = False) -> bool:
    """Whether ``text`` says the knowledge base does not answer (empty counts). See :func:`split_not_found`."""
    return split_not_found(text, cited_is_answer=cited_is_answer)[0]


class ModelSaysNotFound:
    """The model's own "not found" (:func:`split_not_found`): sets the reply aside, or drops a stray token.

    Args:
        cited_is_answer: a reply citing an article is an answer whatever its first sentence says.

    Example:
        >>> ModelSaysNotFound().check(GuardInput("q", "NOT_FOUND", [])).not_found
        True
    """

    name = "model_not_found"
    tells_user = False  # the model said so itself: nothing to explain beside its words

    def __init__(self, *, cited_is_answer: bool = False) -> None:
        self.cited_is_answer = cited_is_answer

    def check(self, inp: GuardInput) -> GuardResult:
        not_found, cleaned = split_not_found(inp.text, cited_is_answer=self.cited_is_answer)
        if not_found:
            return GuardResult("", not_found=True, reason="the model said that the articles shown do not answer")
        dropped = cleaned != inp.text.strip()
        return GuardResult(cleaned, reason="a stray NOT_FOUND after the answer was dropped" if dropped else None)
