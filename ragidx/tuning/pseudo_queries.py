"""Pseudo-queries: questions made from the knowledge base itself, each judged against its own article.

``ragidx tune`` has no labels, so it asks the articles. For a sample of articles it makes one query each
and counts the article it came from as the one relevant result. How the query is made decides what the
calibration rewards:

- ``title``: the article title. Short and topical like a user's query, but the offline reranker's title
  feature sees it verbatim, so it flatters the rerank stage.
- ``first_sentence``: the article's first sentence. Verbatim text of the top chunk: flatters keyword
  search, which finds the exact words.
- ``sentence``: a sentence drawn from anywhere in the article, same bias.
- ``masked_sentence``: a drawn sentence with about half of its content words removed (and its stop words
  kept): fewer exact matches, so keyword search is not handed the answer.
- ``held_out``: a drawn sentence, and the chunks that hold it are *hidden* from the search results
  (``PseudoQuery.hide``), so the article has to be found through its other chunks: no verbatim match for
  either side, only what the rest of the article shares with the sentence's topic (the inverse cloze task
  of Lee et al., 2019). Only articles of two or more chunks can be used.
- ``llm``: a question written by the configured LLM for a passage of the article, in other words than
  the passage (:class:`LLMQueryWriter`). Closest to real questions; one LLM call per query.

The default (``DEFAULT_METHOD``) was chosen by measurement on SciFact and checked on two other sets, see
CHANGELOG.md (2026-11-24, "Why held_out pseudo-queries").

Example:
    >>> from ragidx.article import Article
    >>> a = Article("k1", "Insert a table", "", "Tables hold rows and columns of data. Use Table - Insert.")
    >>> [q.text for q in make_pseudo_queries([a], "first_sentence", seed=0)]
    ['Tables hold rows and columns of data.']
"""

from __future__ import annotations

import logging
import random
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ragidx.article import Article
from ragidx.language import article_language, detect_language
from ragidx.sentences import split_units
from ragidx.terms import SNOWBALL_LANGUAGES, base_language, is_stop_word, words

__all__ = [
    "CHEAP_METHODS",
    "DEFAULT_METHOD",
    "LLMQueryWriter",
    "PseudoQuery",
    "PseudoQueryMethod",
    "make_pseudo_queries",
]

logger = logging.getLogger(__name__)

PseudoQueryMethod = Literal["title", "first_sentence", "sentence", "masked_sentence", "held_out", "llm"]
CHEAP_METHODS: tuple[PseudoQueryMethod, ...] = ("title", "first_sentence", "sentence", "masked_sentence", "held_out")
DEFAULT_METHOD: PseudoQueryMethod = "held_out"

MIN_WORDS = 4
"""A pseudo-query shorter than this (in words) is not made: too vague to have one right answer."""
MAX_WORDS = 40
"""Longer sentences are cut to their first ``MAX_WORDS`` words (queries are short)."""
MASK_KEEP = 0.5
"""Share of a sentence's content words ``masked_sentence`` keeps."""


@dataclass(frozen=True)
class PseudoQuery:
    """One query made from the KB: its text, the article it came from (the relevant one), and how."""

    qid: str
    text: str
    kb_id: str
    method: str
    hide: str | None = None
    """Text whose chunks (in ``kb_id``) are removed from the results: the sentence, for ``held_out``."""

    def hides(self, kb_id: str | None, chunk_text: str) -> bool:
        """Whether a chunk is hidden from this query: it is in the source article and holds the sentence,
        or a third of it at either end (a sentence may straddle two chunks)."""
        if self.hide is None or kb_id != self.kb_id:
            return False
        text = " ".join(chunk_text.split())
        cut = max(12, len(self.hide) // 3)
        return self.hide in text or self.hide[:cut] in text or self.hide[-cut:] in text


def _sentences(article: Article) -> list[str]:
    out = []
    for unit in split_units(article.content):
        text = " ".join(unit.text.split())
        n = len(words(text))
        if n >= MIN_WORDS:
            out.append(text if n <= MAX_WORDS else " ".join(text.split()[:MAX_WORDS]))
    return out


def _mask(sentence: str, rng: random.Random) -> str:
    """Drop about half of the content words (never all); stop words stay so it still reads as text."""
    tokens = sentence.split()
    content = [i for i, t in enumerate(tokens) if any(not is_stop_word(w) for w in words(t))]
    if len(content) < 2:
        return sentence
    keep_n = max(1, round(len(content) * MASK_KEEP))
    dropped = set(rng.sample(content, len(content) - keep_n))
    return " ".join(t for i, t in enumerate(tokens) if i not in dropped)


def make_pseudo_queries(articles: Iterable[Article], method: PseudoQueryMethod, *, seed: int = 0) -> list[PseudoQuery]:
    """One pseudo-query per article (articles with nothing usable are skipped). Deterministic for a seed."""
    if method not in CHEAP_METHODS:
        raise ValueError(
            f"method {method!r} is not a cheap method ({', '.join(CHEAP_METHODS)}); use LLMQueryWriter for 'llm'"
        )
    rng = random.Random(seed)
    out: list[PseudoQuery] = []
    for article in articles:
        text: str | None = None
        hide: str | None = None
        if method == "title":
            title = " ".join(article.title.split())
            text = title if len(words(title)) >= 2 and title != article.kb_id else None
        else:
            sentences = _sentences(article)
            if sentences:
                if method == "first_sentence":
                    text = sentences[0]
                else:
                    text = rng.choice(sentences)
                    if method == "masked_sentence":
                        text = _mask(text, rng)
                    elif method == "held_out":
                        hide = text
        if text:
            out.append(PseudoQuery(f"pq{len(out)}", text, article.kb_id, method, hide))
    return out


# --- questions written by an LLM -------------------------------------------------------------------
QUESTION_PROMPT = """Here is a passage from a knowledge base article titled "{title}".

{passage}

Write one question that a user of this knowledge base might ask, which this passage answers. Use your own \
words, not the passage's phrases. Reply with the question only, in {language}."""

PASSAGE_CHARS = 1200
"""Characters of the article shown to the LLM (its start, cut at a sentence where possible)."""

_PREFIX = re.compile(r"^\s*(?:question|q|вопрос)\s*[:：]\s*", re.IGNORECASE)
_FENCE = re.compile(r"^```[a-z]*\s*|\s*```$", re.IGNORECASE)


@dataclass
class LLMQueryWriter:
    """Pseudo-queries written by an LLM: one question per article, about the article's opening passage.

    The reply is parsed defensively (code fences, a ``Question:`` prefix, quotes, several lines); each
    article whose question cannot be used is counted under a named reason in ``fallbacks``
    (``error``, ``empty``, ``too_short``, ``too_long``, ``copied``) and skipped, so a weak model yields
    fewer queries rather than bad ones.

    Args:
        llm: a LlamaIndex LLM (``complete`` is called once per article).
        max_words: longest question kept.

    Example:
        >>> writer = LLMQueryWriter(llm)                     # doctest: +SKIP
        >>> writer.write(articles)[0].text                   # doctest: +SKIP
        'How do I number the pages in the footer?'
    """

    llm: Any
    max_words: int = MAX_WORDS
    fallbacks: Counter[str] = field(default_factory=Counter)

    def write(
        self, articles: Sequence[Article], *, on_progress: Callable[[int], None] | None = None
    ) -> list[PseudoQuery]:
        out: list[PseudoQuery] = []
        for article in articles:
            passage = _passage(article.content)
            text: str | None = None
            if passage:
                try:
                    prompt = QUESTION_PROMPT.format(
                        title=article.title,
                        passage=passage,
                        language=passage_language(passage, article_language(article)),
                    )
                    reply = self.llm.complete(prompt)
                    text = self.parse(str(getattr(reply, "text", reply)), passage)
                except Exception as exc:  # an endpoint error costs one query, not the calibration
                    logger.warning("question for %s failed: %s", article.kb_id, exc)
                    self.fallbacks["error"] += 1
            if text:
                out.append(PseudoQuery(f"pq{len(out)}", text, article.kb_id, "llm"))
            if on_progress is not None:
                on_progress(1)
        if self.fallbacks:
            logger.info("LLM questions: %d written, skipped %s", len(out), dict(self.fallbacks))
        return out

    def parse(self, reply: str, passage: str) -> str | None:
        """The question in ``reply``, or None (counted in ``fallbacks``)."""
        text = _FENCE.sub("", reply.strip()).strip()
        lines = [_PREFIX.sub("", line).strip().strip("\"'«»“”").strip() for line in text.splitlines()]
        lines = [line for line in lines if line]
        if not lines:
            self.fallbacks["empty"] += 1
            return None
        question = next((line for line in lines if line.endswith("?")), lines[0])
        n = len(words(question))
        if n < MIN_WORDS - 1:
            self.fallbacks["too_short"] += 1
            return None
        if n > self.max_words:
            self.fallbacks["too_long"] += 1
            return None
        if " ".join(words(question)) in " ".join(words(passage)):
            self.fallbacks["copied"] += 1
            return None
        return question


def passage_language(passage: str, language: str | None) -> str:
    """The language to ask for, by name: the passage's, told between English and the article's ``language`` (a
    translated help centre keeps some pages untranslated; the writer passes the article's declared or detected
    language, ``ragidx.language.article_language``). The 1.5B model follows "in Russian": for 30 pages of
    the LibreOffice ru sample (23 of them in Russian) its questions matched the page's language 30 times, against
    23 (16 in Russian) when asked for "the language of the passage"."""
    base = base_language(language)
    code = detect_language(passage, {"en", base} if base else None)
    name = SNOWBALL_LANGUAGES.get(code or "")
    return name.capitalize() if name else "the language of the passage"


def _passage(content: str) -> str:
    text = " ".join(content.split())
    if len(text) <= PASSAGE_CHARS:
        return text
    cut = text[:PASSAGE_CHARS]
    end = cut.rfind(". ")
    return cut[: end + 1] if end > PASSAGE_CHARS // 2 else cut
