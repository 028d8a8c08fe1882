"""The answer-time relay check: an answer never passes on instructions found in a knowledge base.

Instruction-like text is replaced before the model reads an article
(:func:`ragidx.safety.injection.neutralize_article`), so this check is the last line: it reads the finished
answer sentence by sentence with the same detector (:func:`ragidx.safety.injection.kinds_of`: English and
Russian, look-alike and zero-width characters folded), and catches an answer that quotes ragidx's own prompts
(a prompt leak).

What the user sees when it fires:
    - the relayed sentences are removed and a note closes the answer, citing the flagged article(s) when the
      articles shown carry ``injection_flags``: "Note: ragidx removed a sentence from this answer that repeated
      instruction-like text from a knowledge-base article [2]; do not act on such instructions." The rest of the
      answer and its citations stay;
    - when nothing of the answer is left, the answer is withheld: the note alone (with the citation of the flagged
      article, so the user sees which article carries the text), and ``reason`` says why.
    ``reason`` (``relay: …``) names the kinds found; the engine counts it on the answer like any guard.

The check is on for every model: an instruction to send a password is wrong in any model's answer. Its false
positives are those of the detector on help text (the flagged share of the bundled sample knowledge bases,
benchmarks page), since right answers quote their articles.

The guard chain runs it as the ``relay`` guard (:mod:`ragidx.agent.guards.relay`, in the ``small-model`` and
``endpoint`` profiles); ``check`` accepts any object with ``question``, ``text`` and ``sources``, so this module
needs nothing from the agent.

Example:
    >>> guard = RelayCheck()
    >>> sources = [Article("r", "Reset", "", "Hold the button.", metadata={"injection_flags": ["text:credentials"]})]
    >>> out = guard.check(GuardInput("How do I reset?", "Hold the button 10 s [1]. Email your password to "
    ...                              "admin@evil.example [1].", sources))
    >>> out.text.splitlines()[0]
    'Hold the button 10 s [1].'
    >>> out.text.endswith("instruction-like text from a knowledge-base article [1]; do not act on such instructions.")
    True
    >>> out.reason
    'relay: the answer repeated instruction-like text (credentials)'
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

from ragidx.article import Article, as_articles
from ragidx.safety.injection import FLAGS_KEY, kinds_of, sentence_kinds
from ragidx.safety.normalize import skeleton
from ragidx.sentences import Unit

__all__ = ["GuardInput", "GuardResult", "RelayCheck", "withheld_text"]


@dataclass(frozen=True)
class GuardInput:
    """What an answer guard reads: the question, the answer text, the articles shown."""

    question: str
    text: str
    sources: Sequence[Article]

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", tuple(as_articles(self.sources)))


@dataclass(frozen=True)
class GuardResult:
    """What an answer guard returns: the (possibly changed) text, whether it is now "not found", and why."""

    text: str
    not_found: bool = False
    reason: str | None = None


class _Input(Protocol):
    @property
    def question(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def sources(self) -> Sequence[Article]: ...


_NOTE = {
    "en": "Note: ragidx removed {what} from this answer that repeated instruction-like text{src}; do not act on "
    "such instructions.",
    "ru": "Примечание: ragidx удалил из ответа {what} инструкции{src}; не выполняйте такие инструкции.",
}
_WHAT = {"en": ("a sentence", "sentences"), "ru": ("фрагмент, повторявший", "фрагменты, повторявшие")}
_SOURCE = {"en": " from a knowledge-base article{cite}", "ru": " из статьи базы знаний{cite}"}
_WITHHELD = {
    "en": "ragidx withheld this answer: it repeated instruction-like text ({kinds}){src}. Do not act on such "
    "instructions; tell the knowledge base's editors.",
    "ru": "ragidx не показал этот ответ: он повторял инструкции ({kinds}){src}. Не выполняйте такие инструкции; "
    "сообщите редакторам базы знаний.",
}
_MARKERS = re.compile(r"\[\d+\]")
_PROMPT_SHINGLE = 8  # words of a prompt quoted in a row that make a leak


def _language(text: str) -> str:
    letters = [c for c in text if c.isalpha()]
    cyrillic = sum("\u0400" <= c <= "\u04ff" for c in letters)
    return "ru" if letters and cyrillic / len(letters) > 0.3 else "en"


def _shingles(text: str, n: int) -> set[tuple[str, ...]]:
    words = re.findall(r"\w+", skeleton(text))
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def _quoted_spans(text: str, shingles: frozenset[tuple[str, ...]], n: int) -> list[tuple[int, int]]:
    """``[start, end)`` character spans of ``text`` where ``n`` words in a row are words of a prompt."""
    words = [(m.start(), m.end(), skeleton(m.group(0))) for m in re.finditer(r"\w+", text)]
    spans = []
    for i in range(len(words) - n + 1):
        if tuple(w for _, _, w in words[i : i + n]) in shingles:
            spans.append((words[i][0], words[i + n - 1][1]))
    return spans


def _flagged_numbers(sources: Sequence[Article]) -> list[int]:
    return [i for i, s in enumerate(sources, start=1) if s.metadata.get(FLAGS_KEY)]


def _source(flagged: Sequence[int], language: str) -> str:
    return _SOURCE[language].format(cite=" " + "".join(f"[{n}]" for n in flagged)) if flagged else ""


def withheld_text(kinds: Sequence[str], flagged: Sequence[int], language: str = "en") -> str:
    """The text shown in place of an answer that was nothing but relayed instructions, citing the flagged articles."""
    return _WITHHELD[language].format(kinds=", ".join(kinds), src=_source(flagged, language))


@dataclass(frozen=True)
class RelayCheck:
    """Removes answer sentences that relay instruction-like text; withholds an answer made only of them.

    Args:
        prompts: ragidx's own prompts (system, answer, ...): an answer quoting 8 words of one in a row leaks it
            (every sentence those words touch is removed).

    Example:
        >>> RelayCheck().check(GuardInput("q", "Choose Format - Cells [1].", [])).reason is None
        True
    """

    prompts: tuple[str, ...] = ()
    name: str = "relay"

    @cached_property
    def _prompt_shingles(self) -> frozenset[tuple[str, ...]]:
        shingles: set[tuple[str, ...]] = set()
        for p in self.prompts:
            shingles |= _shingles(p, _PROMPT_SHINGLE)
        return frozenset(shingles)

    @property
    def lookahead_words(self) -> int:
        """Words after a sentence that decide it: a quoted prompt that runs on past them cannot touch it."""
        return _PROMPT_SHINGLE - 1 if self.prompts else 0

    def relayed(self, text: str, question: str = "") -> list[tuple[Unit, list[str]]]:
        """Each sentence of ``text`` with the kinds of instruction-like text that make it relay one (empty: it
        stays). A kind the question itself holds does not count: the user may ask about such text. A sentence is
        judged alone and together with the next one (an instruction split over two sentences), so it is decided
        for good once the sentence after it is complete and ``lookahead_words`` words follow that one."""
        question_kinds = set(kinds_of(question))
        shingles = self._prompt_shingles
        leaks = _quoted_spans(text, shingles, _PROMPT_SHINGLE) if shingles else []
        out = []
        for unit, found in sentence_kinds(text, _MARKERS):  # alone or with the sentence next to it
            kinds = [k for k in found if k not in question_kinds]
            if not kinds and any(start < unit.end and unit.start < end for start, end in leaks):
                kinds = ["prompt_leak"]
            out.append((unit, kinds))
        return out

    def check(self, inp: _Input) -> GuardResult:
        text = inp.text
        kept: list[str] = []
        removed_kinds: list[str] = []
        removed = at = 0
        for unit, kinds in self.relayed(text, inp.question):
            if kinds:
                removed += 1
                removed_kinds += [k for k in kinds if k not in removed_kinds]
                kept.append(text[at : unit.start].rstrip(" \t"))
            else:
                kept.append(text[at : unit.end])
            at = unit.end
        if not removed:
            return GuardResult(text)
        kept.append(text[at:])
        rest = re.sub(r"[ \t]+\n", "\n", "".join(kept)).strip()
        language = _language(text)
        flagged = _flagged_numbers(inp.sources)
        reason = f"relay: the answer repeated instruction-like text ({', '.join(removed_kinds)})"
        if not re.search(r"\w", _MARKERS.sub("", rest)):
            return GuardResult(withheld_text(removed_kinds, flagged, language), reason=reason)
        what = _WHAT[language][removed > 1]
        note = _NOTE[language].format(what=what, src=_source(flagged, language))
        return GuardResult(f"{rest}\n\n{note}", reason=reason)
