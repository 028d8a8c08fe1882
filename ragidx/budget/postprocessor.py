"""ContextBudgetPostprocessor: ragidx's context budget as a LlamaIndex node postprocessor.

Put it last in any query or chat engine's ``node_postprocessors`` and the nodes that reach the response
synthesizer fit one prompt of the LLM's window, with room left for the synthesizer's template, the question and
the answer::

    RetrieverQueryEngine.from_args(retriever, llm=llm, node_postprocessors=[..., ContextBudgetPostprocessor(llm=llm)])

What it does, with :class:`~ragidx.budget.ContextBudget` (the agent's budget, not a second one):

1. **Articles, deduplicated.** Nodes are grouped into articles by ``metadata["kb_id"]``, else ``ref_doc_id``,
   else their own id: ragidx's whole-article nodes stay one article each, chunks of a stock index are joined
   (in document order when they carry character offsets; a text already inside another is left out). Each
   article keeps its best score.
2. **Ranked.** When every node carries ``article_rank`` / ``normalized_rank`` (ragidx's grouper, flash) their
   order is the rank; else articles are ranked by score (best first, ties in arrival order).
3. **Fitted.** The prompt is rendered as the synthesizer would send it: the largest of ``prompt_templates``
   (default: LlamaIndex's text QA and refine templates, chat or text as the LLM is), with the question, each
   article as its node's text for the LLM (metadata lines included, ``"\\n\\n"`` between them) and the LLM's
   system prompt, counted with the budget's tokenizer. Above the budget's trigger (75% of a window under 16K,
   else 85%) the articles are compressed to its target (70% / 80%) in proportion to their rank, guided by the
   question; the worst are cut or dropped while the prompt passes the hard limit: the window minus a 5% margin,
   the answer's ``num_output`` and the ``response_padding`` LlamaIndex's refine and compact synthesizers keep
   free (500 tokens: their ``PromptHelper.repack`` packs at most ``window - template - num_output - 500``
   tokens of context into one call). So a compact synthesizer puts every article kept in one call.
4. **Out.** One node per article kept, best first, with fresh ``article_rank`` (0, 1, ...) and
   ``normalized_rank`` (0.0 .. 1.0) and, when shortened, ``compressed``, ``original_tokens`` and ``tokens``;
   these keys are hidden from the LLM's and the embedding's view of the node. ``last_report`` is the
   :class:`~ragidx.budget.report.BudgetReport`; a ``ContextBudgetEvent`` goes to LlamaIndex instrumentation.

The window comes from ``context_window`` / ``num_output`` when given, else from ``llm.metadata`` (the way
``PromptHelper.from_llm_metadata`` reads it). ``reserve_tokens`` keeps more room free for what the template
does not show: a chat engine's history, a long system prompt the engine adds. The prompt an LLM receives is
guaranteed only by the LLM's own count: wrap it in :class:`~ragidx.agent.budgeted_llm.BudgetedLLM` for that
(this postprocessor makes the prompts it sees fit without compressing them again).

Example:
    >>> from llama_index.core.schema import NodeWithScore, TextNode
    >>> post = ContextBudgetPostprocessor(context_window=2048, num_output=256)
    >>> nodes = [NodeWithScore(node=TextNode(text="Press Ctrl+F12 to insert a table. " * 200), score=0.9)]
    >>> out = post.postprocess_nodes(nodes, query_str="How do I insert a table?")
    >>> (len(out), out[0].node.metadata["compressed"], post.last_report.tokens_after < 2048 * 0.75)
    (1, True, True)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.constants import DEFAULT_NUM_OUTPUTS
from llama_index.core.llms.llm import LLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.prompts.default_prompt_selectors import DEFAULT_REFINE_PROMPT_SEL, DEFAULT_TEXT_QA_PROMPT_SEL
from llama_index.core.response_synthesizers.refine import DEFAULT_RESPONSE_PADDING_SIZE
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode

from ragidx.article import ARTICLE_RANK, MATCHED_SPANS, NORMALIZED_RANK, RERANK_SCORE, Article, SearchResult
from ragidx.budget.compressor import ArticleCompressor
from ragidx.budget.hook import ContextBudget
from ragidx.budget.report import BudgetReport
from ragidx.providers.tokenizer import TokenCounter

__all__ = ["BUDGET_METADATA_KEYS", "ContextBudgetPostprocessor"]

BUDGET_METADATA_KEYS = (ARTICLE_RANK, NORMALIZED_RANK, RERANK_SCORE, "compressed", "original_tokens", "tokens")
"""Metadata the postprocessor writes on its nodes, hidden from the LLM's and the embedding's view."""
_CALL = "context"
_CONTEXT_VARS = ("context_str", "context_msg")


@dataclass
class _Group:
    """One article: its nodes (best first), best score, the node standing for it, and its joined text."""

    key: str
    score: float | None
    first: int
    nodes: list[NodeWithScore] = field(default_factory=list)
    text: str = ""
    spans: list[list[int]] = field(default_factory=list)

    @property
    def head(self) -> NodeWithScore:
        return self.nodes[0]


class ContextBudgetPostprocessor(BaseNodePostprocessor):
    """Fits whole articles into one prompt of the LLM's window by rank (see the module docstring).

    Args:
        llm: The LLM the synthesizer calls: its window, ``num_output``, system prompt and chat/text templates.
        context_window / num_output: The window and the reserved answer, instead of (or without) ``llm``.
        prompt_templates: The templates the context goes into (default: LlamaIndex's text QA and refine); the
            largest, rendered with the question and no context, is the fixed part. A template's context variable
            is ``context_str`` or ``context_msg``.
        reserve_tokens: Tokens kept free besides the template (a chat history, an engine's own system prompt).
        token_counter: Counts tokens (default tiktoken ``cl100k_base``); compressor: default extractive.
        trigger_pct / target_pct / safety_margin_pct / min_article_tokens / relevance_floor: as
            :class:`~ragidx.budget.ContextBudget`.

    Attributes:
        last_report: The report of the latest call (``None`` before the first).
    """

    context_window: int | None = Field(default=None, gt=0, description="Window in tokens (default: the LLM's).")
    num_output: int | None = Field(default=None, ge=0, description="Tokens reserved for the answer.")
    reserve_tokens: int = Field(default=0, ge=0, description="Tokens kept free besides the prompt template.")
    response_padding: int = Field(
        default=DEFAULT_RESPONSE_PADDING_SIZE,
        ge=0,
        description="Tokens LlamaIndex's refine and compact synthesizers keep free on top of num_output.",
    )
    trigger_pct: float = Field(default=0.85, description="Compress above this share of the window.")
    target_pct: float = Field(default=0.80, description="Compress down to this share of the window.")
    safety_margin_pct: float = Field(default=0.05, description="Share of the window kept free for tokenizers.")
    min_article_tokens: int = Field(default=300, ge=1, description="Per-article minimum (adapted down).")
    relevance_floor: float = Field(default=0.0, ge=0.0, lt=1.0, description="Drop articles under this share.")

    _llm: LLM | None = PrivateAttr(default=None)
    _templates: list[BasePromptTemplate] = PrivateAttr(default_factory=list)
    _budget: ContextBudget = PrivateAttr()
    _reports: list[BudgetReport] = PrivateAttr(default_factory=list)

    def __init__(
        self,
        llm: LLM | None = None,
        *,
        prompt_templates: Sequence[BasePromptTemplate] | None = None,
        token_counter: TokenCounter | None = None,
        compressor: ArticleCompressor | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._llm = llm
        self._templates = list(prompt_templates or (DEFAULT_TEXT_QA_PROMPT_SEL, DEFAULT_REFINE_PROMPT_SEL))
        for template in self._templates:
            if not any(v in template.template_vars for v in _CONTEXT_VARS):
                raise ValueError(
                    f"a prompt template has no context variable ({' or '.join(_CONTEXT_VARS)}): "
                    f"{sorted(template.template_vars)}; pass the template the synthesizer fills with the context"
                )
        self._budget = ContextBudget(
            token_counter,
            compressor,
            trigger_pct=self.trigger_pct,
            target_pct=self.target_pct,
            min_article_tokens=self.min_article_tokens,
            safety_margin_pct=self.safety_margin_pct,
            max_articles_per_call=None,
            relevance_floor=self.relevance_floor,
        )
        self._reports = []
        self.window()  # no window at all fails here, not at the first query

    @classmethod
    def class_name(cls) -> str:
        return "ContextBudgetPostprocessor"

    @property
    def last_report(self) -> BudgetReport | None:
        return self._reports[-1] if self._reports else None

    @property
    def reports(self) -> list[BudgetReport]:
        """One report per call, in order."""
        return self._reports

    def window(self) -> tuple[int, int]:
        """``(context_window, num_output)``: the ones given, else the LLM's metadata (``num_output`` -1: 256)."""
        meta = self._llm.metadata if self._llm is not None else None
        window = self.context_window or (meta.context_window if meta else None)
        if not window:
            raise ValueError(
                "ContextBudgetPostprocessor needs the LLM's window: pass llm=<the synthesizer's LLM> or "
                "context_window=<tokens> (and num_output=<tokens the answer may take>)"
            )
        out = self.num_output if self.num_output is not None else (meta.num_output if meta else DEFAULT_NUM_OUTPUTS)
        return window, DEFAULT_NUM_OUTPUTS if out < 0 else out

    # --- the postprocessor ----------------------------------------------------------------------------
    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        question = query_bundle.query_str if query_bundle is not None else ""
        groups = _ranked(_groups(nodes))
        if not groups:
            return []
        scores = [g.score for g in groups]
        # The floor reads scores; they are passed only where they agree with the rank (not after flash, say).
        known = [s for s in scores if s is not None]
        scored = len(known) == len(scores) and all(a >= b for a, b in zip(known, known[1:], strict=False))
        articles = tuple(_article(g, rank, len(groups), scored) for rank, g in enumerate(groups))
        by_key = {g.key: g for g in groups}
        template = self._largest_template(question)

        def render(conversation: Sequence[ChatMessage], sent: Mapping[str, SearchResult], _: Any) -> list[ChatMessage]:
            has_context = any(m.role == MessageRole.TOOL for m in conversation)
            shown = sent[_CALL].articles if has_context and _CALL in sent else ()
            context = "\n\n".join(_node(by_key[a.kb_id], a).get_content(MetadataMode.LLM).strip() for a in shown)
            return self._messages(template, question, context)

        window, num_output = self.window()
        messages = [
            ChatMessage(role=MessageRole.USER, content=question),
            ChatMessage(role=MessageRole.TOOL, content="", additional_kwargs={"tool_call_id": _CALL}),
        ]
        fit = self._budget.fit(
            messages,
            {_CALL: SearchResult(articles)},
            render,
            question=question,
            context_window=window,
            max_output_tokens=num_output + self.response_padding + self.reserve_tokens,
        )
        self._reports.append(fit.report)
        kept = [a for a in fit.articles if a.content.strip()]
        out = []
        for rank, a in enumerate(kept):
            ranks = {ARTICLE_RANK: rank, NORMALIZED_RANK: rank / max(1, len(kept) - 1)}
            out.append(NodeWithScore(node=_node(by_key[a.kb_id], a, ranks), score=by_key[a.kb_id].score))
        return out

    # --- the prompt -----------------------------------------------------------------------------------
    def _messages(self, template: BasePromptTemplate, question: str, context: str) -> list[ChatMessage]:
        """The prompt as the synthesizer sends it: the template with the question and ``context`` (its other
        variables empty, as LlamaIndex's ``PromptHelper`` measures a template), the LLM's system prompt first, and
        the question as a user message after it when the template does not hold it (a chat engine's system
        prompt)."""
        values = {v: "" for v in template.template_vars if v not in template.kwargs}
        values.update(
            {k: v for k, v in (("query_str", question), *((c, context) for c in _CONTEXT_VARS)) if k in values}
        )
        messages = list(template.format_messages(llm=self._llm, **values))
        system = getattr(self._llm, "system_prompt", None) if self._llm is not None else None
        if system:
            messages.insert(0, ChatMessage(role=MessageRole.SYSTEM, content=system))
        if "query_str" not in template.template_vars:
            messages.append(ChatMessage(role=MessageRole.USER, content=question))
        return messages

    def _largest_template(self, question: str) -> BasePromptTemplate:
        count = self._budget.accountant.count_prompt
        return max(self._templates, key=lambda t: count(self._messages(t, question, "")))


def _groups(nodes: Sequence[NodeWithScore]) -> list[_Group]:
    """Nodes by article (kb_id, else ref_doc_id, else node id), in order of first arrival."""
    groups: dict[str, _Group] = {}
    for position, n in enumerate(nodes):
        key = str(n.node.metadata.get("kb_id") or n.node.ref_doc_id or n.node.node_id)
        g = groups.setdefault(key, _Group(key, None, position))
        g.nodes.append(n)
        if n.score is not None and (g.score is None or n.score > g.score):
            g.score = float(n.score)
    for g in groups.values():
        g.nodes.sort(key=lambda n: -math.inf if n.score is None else -float(n.score))  # stable: arrival order
        _join(g)
    return list(groups.values())


def _join(g: _Group) -> None:
    """The article's text: its distinct node texts in document order (offsets, else best first); a text found
    inside another is left out. ``spans`` are where the best three nodes sit in it (for the compressor)."""
    texts: list[tuple[float, int, str, str]] = []  # (document offset, best-first position, node id, text)
    for i, n in enumerate(g.nodes):
        text = n.node.get_content(MetadataMode.NONE).strip()
        start = getattr(n.node, "start_char_idx", None)
        texts.append((float(start) if start is not None else math.inf, i, n.node.node_id, text))
    if all(t[0] != math.inf for t in texts):
        texts.sort(key=lambda t: (t[0], t[1]))
    kept: list[tuple[int, str]] = []
    for _, i, _, text in texts:
        if text and not any(text in other for _, other in kept):
            kept = [(j, o) for j, o in kept if o not in text]  # a longer text holding an earlier one replaces it
            kept.append((i, text))
    g.text = "\n\n".join(t for _, t in kept)
    for _, text in sorted(kept)[:3]:
        start = g.text.find(text)
        if start >= 0 and len(kept) > 1:
            g.spans.append([start, start + len(text)])


def _ranked(groups: list[_Group]) -> list[_Group]:
    """Best first: by the nodes' own ranks when every article has one, else by score (ties: arrival)."""

    def own(g: _Group) -> float | None:
        meta = g.head.node.metadata
        value = meta.get(ARTICLE_RANK, meta.get(NORMALIZED_RANK))
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    if groups and all(own(g) is not None for g in groups):
        return sorted(groups, key=lambda g: (own(g), g.first))
    return sorted(groups, key=lambda g: (-g.score if g.score is not None else math.inf, g.first))


def _article(g: _Group, rank: int, n: int, scored: bool) -> Article:
    meta = g.head.node.metadata
    extra: dict[str, Any] = {NORMALIZED_RANK: rank / max(1, n - 1), ARTICLE_RANK: rank}
    if scored and g.score is not None:
        extra[RERANK_SCORE] = g.score
    spans = g.spans or (meta.get(MATCHED_SPANS) if len(g.nodes) == 1 else None)
    if spans:
        extra[MATCHED_SPANS] = spans
    return Article(g.key, str(meta.get("title") or ""), str(meta.get("url") or ""), g.text, metadata=extra)


def _node(g: _Group, article: Article, ranks: Mapping[str, Any] | None = None) -> TextNode:
    """The node that stands for ``article`` as the budget sent it: the article's head node with its text and
    what the budget did in metadata (hidden from the LLM and the embedding)."""
    head = g.head.node
    meta = {k: v for k, v in head.metadata.items() if k != MATCHED_SPANS or len(g.nodes) == 1}
    meta.update(ranks or {})
    if g.score is not None and RERANK_SCORE not in meta:
        meta[RERANK_SCORE] = g.score
    for key in ("compressed", "original_tokens", "tokens"):
        if key in article.metadata:
            meta[key] = article.metadata[key]
    if article.content != g.text:
        meta.pop(MATCHED_SPANS, None)  # offsets into the full text mean nothing in a compressed one

    def hidden(keys: list[str]) -> list[str]:
        return [*keys, *(k for k in BUDGET_METADATA_KEYS if k not in keys)]

    return TextNode(
        id_=head.node_id if len(g.nodes) == 1 else g.key,
        text=article.content,
        metadata=meta,
        excluded_llm_metadata_keys=hidden(list(head.excluded_llm_metadata_keys)),
        excluded_embed_metadata_keys=hidden(list(head.excluded_embed_metadata_keys)),
        relationships=dict(head.relationships),
        metadata_template=head.metadata_template,
        metadata_separator=head.metadata_separator,
        text_template=getattr(head, "text_template", TextNode.model_fields["text_template"].default),
    )
