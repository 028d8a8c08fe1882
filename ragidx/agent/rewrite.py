"""Follow-up questions as standalone searches: the query rewriter seam.

A question in a conversation often leans on the one before it ("How do I insert a table of contents?" then
"And how do I update it?"); searched alone it finds the wrong articles. A :class:`QueryRewriter` turns the
question into what the turn searches for, given the conversation before it:

- :class:`HeuristicRewriter` (the local model's): no model call. A question that leans on the one before it by
  its words is searched together with that question; any other is searched as asked. A slow local model
  pays for no extra call.
- :class:`CondenseRewriter` (endpoints'): one short LLM call with a replaceable ``condense_prompt`` writes the
  standalone question, as LlamaIndex's ``CondensePlusContextChatEngine`` does; ``skip_condense=True`` turns
  it off. No call on a first question.

The answer prompt always asks the question as the user wrote it; the rewrite only decides what is searched.

Example:
    >>> toc = [ChatMessage(role=MessageRole.USER, content="How do I insert a TOC?")]
    >>> HeuristicRewriter().rewrite(toc, "And how do I update it?")
    'How do I insert a TOC? And how do I update it?'
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.llms.llm import LLM
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.prompts.mixin import PromptDictType, PromptMixin, PromptMixinType

from ragidx.agent.prompts import CONDENSE_PROMPT, checked
from ragidx.budget.messages import message_text
from ragidx.providers.chat import ChatCaller, LLMUnavailableError
from ragidx.sync_call import run_sync
from ragidx.terms import terms

logger = logging.getLogger(__name__)

__all__ = [
    "CondenseRewriter",
    "HeuristicRewriter",
    "QueryRewriter",
    "earlier_questions",
    "follow_up_query",
]


@runtime_checkable
class QueryRewriter(Protocol):
    """Turns a question into the standalone question a turn searches for, given the conversation before it."""

    def rewrite(self, history: Sequence[ChatMessage], question: str) -> str: ...

    async def arewrite(self, history: Sequence[ChatMessage], question: str) -> str: ...


class HeuristicRewriter:
    """The question before it, then this one, when this one leans on it by its words (see
    :func:`follow_up_query`); else the question as asked.

    Example:
        >>> HeuristicRewriter().rewrite([], "And how do I update it?")
        'And how do I update it?'
    """

    def rewrite(self, history: Sequence[ChatMessage], question: str) -> str:
        return follow_up_query(history, question) or question

    async def arewrite(self, history: Sequence[ChatMessage], question: str) -> str:
        return self.rewrite(history, question)


class CondenseRewriter(PromptMixin):
    """A follow-up rewritten by the LLM into a standalone question with ``condense_prompt`` (variables
    ``{chat_history}``, ``{question}``); the question as asked on a first question, with ``skip_condense``, or
    when the call fails or replies with nothing usable (a rewrite can only help the search, never stop a turn,
    unless the endpoint is down, which the answer would hit too).

    Args:
        llm: the model that condenses (the agent's).
        condense_prompt: the prompt; default :data:`ragidx.agent.prompts.CONDENSE_PROMPT`.
        skip_condense: search every question as asked.
        max_messages: how many of the conversation's last messages the prompt shows.

    Example:
        >>> rewriter = CondenseRewriter(llm)                                  # doctest: +SKIP
        >>> rewriter.rewrite(history, "And how do I update it?")              # doctest: +SKIP
        'How do I update a table of contents in Writer?'
    """

    def __init__(
        self,
        llm: LLM,
        *,
        condense_prompt: BasePromptTemplate | None = None,
        skip_condense: bool = False,
        max_messages: int = 6,
    ) -> None:
        self.llm = llm
        self.condense_prompt = condense_prompt or PromptTemplate(CONDENSE_PROMPT)
        self.skip_condense = skip_condense
        self.max_messages = max_messages

    def _get_prompts(self) -> PromptDictType:
        return {"condense_prompt": self.condense_prompt}

    def _update_prompts(self, prompts_dict: PromptDictType) -> None:
        checked(prompts_dict, self._get_prompts())
        self.condense_prompt = prompts_dict.get("condense_prompt", self.condense_prompt)

    def _get_prompt_modules(self) -> PromptMixinType:
        return {}

    def rewrite(self, history: Sequence[ChatMessage], question: str) -> str:
        return run_sync(self.arewrite(history, question))

    async def arewrite(self, history: Sequence[ChatMessage], question: str) -> str:
        shown = [m for m in history if m.role in (MessageRole.USER, MessageRole.ASSISTANT) and message_text(m)]
        if self.skip_condense or not _questions(shown):
            return question
        lines = [f"{m.role.value}: {message_text(m).strip()}" for m in shown[-self.max_messages :]]
        prompt = self.condense_prompt.format(chat_history="\n".join(lines), question=question)
        try:
            response = await ChatCaller(self.llm, retries=0).achat([ChatMessage(role=MessageRole.USER, content=prompt)])
        except LLMUnavailableError:
            raise
        except Exception as exc:  # any other failure: search the question as asked
            logger.warning("condensing the follow-up question failed (%s); searching it as asked", exc)
            return question
        lines = [line.strip() for line in (response.message.content or "").splitlines() if line.strip()]
        condensed = lines[0].strip("\"'`«»“”").strip() if lines else ""
        return condensed if 0 < len(condensed) <= max(200, 4 * len(question)) else question


# Words by which a question leans on the one before it ("And how do I update it?", "А как её снять?").
_REFERRING = frozenset(
    "it its this that these those they them their same "
    "он она оно они его её ее их него неё нее них ему ей им этот эта это эту эти этого этой этом этим этих "
    "тот того той том тем тех".split()
)
_CONTINUING = frozenset("and also but then а и но тогда также ещё еще".split())


def follow_up_query(history: Sequence[ChatMessage], question: str) -> str | None:
    """The search query for a follow-up question: the conversation's last question, then this one ("How do I
    insert a table of contents? And how do I update it?"). A question leans on the one before it when it starts
    with "and", "also", "what about", "а", "и"..., names what it is about by "it", "that", "это", "его"..., or has
    at most one word of its own to search by; None when it does not (it stands on its own) or nothing was asked
    before. Searched alone, a follow-up's few words match unrelated articles; a question that stands on its own
    is searched without the one before it, which would pull in that question's topic.

    Example:
        >>> toc = [ChatMessage(role=MessageRole.USER, content="How do I insert a TOC?")]
        >>> follow_up_query(toc, "And how do I update it?")
        'How do I insert a TOC? And how do I update it?'
        >>> follow_up_query(toc, "How can I protect cells in a Calc sheet from changes?") is None
        True
    """
    earlier = _questions(history)
    if not earlier:
        return None
    words = re.findall(r"\w+", question.lower())
    first = words[0] if words else ""
    leans = first in _CONTINUING or words[:2] == ["what", "about"] or bool(_REFERRING.intersection(words))
    if not leans and len(terms(question)) > 1:
        return None
    return f"{earlier[-1]} {question}"


EARLIER_QUESTIONS = 4
"""How many of a conversation's last questions a forced-mode (local model) turn shows."""


def earlier_questions(history: Sequence[ChatMessage]) -> list[ChatMessage]:
    """The conversation as a forced-mode turn shows it: its last questions, in one message, or nothing.

    Example:
        >>> h = [ChatMessage(role=MessageRole.USER, content="How do I protect cells?"),
        ...      ChatMessage(role=MessageRole.ASSISTANT, content="Choose Tools - Protect Sheet [1].")]
        >>> [m.content for m in earlier_questions(h)]
        ['Earlier in this conversation I asked: How do I protect cells?']
    """
    asked = _questions(history)
    if not asked:
        return []
    text = "Earlier in this conversation I asked: " + " / ".join(asked[-EARLIER_QUESTIONS:])
    return [ChatMessage(role=MessageRole.USER, content=text)]


def _questions(history: Sequence[ChatMessage]) -> list[str]:
    """What the user asked in ``history``, in order."""
    return [text for m in history if m.role == MessageRole.USER and (text := message_text(m).strip())]
