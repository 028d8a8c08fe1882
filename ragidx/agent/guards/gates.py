"""Gates before the answer: reasons not to ask the model at all, said to the user as the answer's
``not_found_reason``. A question none of whose words the articles shown write, or naming something no article
found mentions, cannot be answered from them; a small model asked anyway improvises. The answer check asks the
model itself, in one token on the answer's prompt (:func:`check_options` for llama.cpp's server, read by
:func:`check_log_odds`).

Example:
    >>> MissingIdentifiers().check(GateInput("default of io_method?", [], [Article("a", "", "", "work_mem: 4MB")]))
    'no article found mentions io_method'
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatResponse

from ragidx.agent.citations import content_words, shown_text
from ragidx.agent.guards.base import GateInput
from ragidx.article import Article

CHECK_TOKENS = ("YES", "NO")
"""The answer check's two replies (:func:`check_options` lifts both)."""
RELEVANCE_GATES = ("shares_terms", "missing_identifiers")
"""The gates that judge the articles found before any model call (``RagAgent(relevance_gate=False)`` skips them)."""
ANSWER_CHECK = "answer_check"
"""The gate that judges the model's one-token answer check."""

# Names a question can mention that a knowledge base either has or has not: snake_case and dotted names
# (``io_method``, ``pg_stat_io``, ``postgresql.conf``), command-line flags (``--incremental``), camelCase and
# ALL-CAPS terms (``HNSW``). Plain words are not (documentation paraphrases them), nor capitalized names
# such as PostgreSQL or LibreOffice: a product's own pages rarely repeat its name.
_IDENTIFIER = re.compile(
    r"(?<![\w-])(--?[A-Za-z][\w-]+|[A-Za-z]\w*(?:[_.][A-Za-z0-9]\w*)+|[a-z]+[A-Z]\w*|[A-Z]{3,}\d*)(?!\w)"
)


def missing_identifiers(question: str, sources: Sequence[Article]) -> list[str]:
    """The names in ``question`` (see ``_IDENTIFIER``) that no source writes, case-insensitively.

    A question about ``io_method`` over articles that never write ``io_method`` cannot be answered from
    them; a small model asked anyway invents a value ("the default of io_method is 1").

    Example:
        >>> shown = [Article("m", "Memory", "", "work_mem: 4MB")]
        >>> missing_identifiers("What is the default of io_method and work_mem?", shown)
        ['io_method']
    """
    names = dict.fromkeys(m.strip(".") for m in _IDENTIFIER.findall(question))
    text = shown_text(sources, "").lower()
    return [n for n in names if n and n.lower() not in text]


def shares_terms(question: str, sources: Sequence[Article]) -> bool:
    """Whether any source contains any content word of the question (a cheap "is this on topic" gate).

    A question none of whose words occur in the retrieved articles cannot be answered from them;
    the agent then says so instead of letting a small model improvise.
    """
    asked = content_words(question)
    if not asked:
        return True
    return any(asked & content_words(f"{s.title} {s.content}") for s in sources)


class SharesTerms:
    """Not asked when no article shown shares a content word with the question (:func:`shares_terms`)."""

    name = "shares_terms"

    def check(self, inp: GateInput) -> str | None:
        return None if shares_terms(inp.question, inp.sources) else "no article shown shares a word with the question"


class MissingIdentifiers:
    """Not asked when the question names something (``io_method``, ``--incremental``, ``HNSW``) that no article
    found mentions (:func:`missing_identifiers`)."""

    name = "missing_identifiers"

    def check(self, inp: GateInput) -> str | None:
        missing = missing_identifiers(inp.question, inp.retrieved)
        return f"no article found mentions {', '.join(missing)}" if missing else None


class AnswerCheck:
    """Not asked when the model, asked first in one token whether the articles shown answer the question,
    replied NO (the workflow asks, with YES lifted by the margin; a profile with this gate switches it on).

    Example:
        >>> AnswerCheck().check(GateInput("q", [], check_reply="NO", check_log_odds=-1.5, check_margin=0.2))
        'the model judged that the articles shown do not answer the question (log-odds -1.50 < margin +0.20)'
    """

    name = "answer_check"

    def check(self, inp: GateInput) -> str | None:
        if inp.check_reply is None or not inp.check_reply.strip().upper().startswith(CHECK_TOKENS[1]):
            return None
        odds, margin = inp.check_log_odds, inp.check_margin
        figures = "" if odds is None or margin is None else f" (log-odds {odds:+.2f} < margin {margin:+.2f})"
        return f"the model judged that the articles shown do not answer the question{figures}"


def check_options(margin: float) -> dict[str, Any]:
    """The answer check's request options for llama.cpp's server: one token, greedy, YES or NO (both +100), YES
    ``margin`` less. ``max_tokens`` goes in the body: LlamaIndex's ``OpenAI`` puts its own ``max_tokens`` over a
    call's, and the two lifted tokens never end a reply, so the server would write them until that limit. The
    token's ``logprobs`` are asked for too (:func:`check_log_odds`)."""
    yes, no = CHECK_TOKENS
    return {
        "temperature": 0.0,
        "logit_bias": {yes: 100.0 - margin, no: 100.0},
        "extra_body": {
            "logit_bias_type": "tokens",
            "max_tokens": 1,
            "logprobs": True,
            "top_logprobs": CHECK_TOP_LOGPROBS,
        },
    }


CHECK_TOP_LOGPROBS = 20
"""Alternatives asked for with the check's token: YES and NO are nearly always among them."""


def check_log_odds(response: ChatResponse) -> float | None:
    """The check's log P(YES) - log P(NO) before the bias, from the reply's ``logprobs`` (ragidx's local server
    reports the model's own; None when the server sent none or either token is not among them)."""
    first = (response.logprobs or [[]])[0]
    odds = []
    for token in CHECK_TOKENS:
        # the very token the bias lifts, else the likeliest other spelling of it (with a leading space, say)
        spelled = [lp.logprob for lp in first if lp.token == token] or [
            lp.logprob for lp in first if lp.token.strip() == token
        ]
        if not spelled:
            return None
        odds.append(max(spelled))
    return odds[0] - odds[1]
