"""The ranks every reordering stage leaves on its output: one rule, one function.

Each stage that orders nodes (a chunk reranker, the ``ArticleGrouper``, the ``FlashReranker``, the chain's
article step) hands its output to ``assign_ranks``, so whatever runs next (another reranker, the context
budget, a citation) reads ranks that describe the order it was given:

- ``article_rank``: the 0-based position in the output;
- ``normalized_rank``: 0.0 for the first … 1.0 for the last (a lone node: 0.0);
- ``rerank_score``: the node's score as this stage left it (a node without one: 0.0).

A stage's own scores (flash's position score, a chunk reranker's model score) are the nodes' ``score``; the
ranks follow the list order, not the scores, so a stage that orders by something other than its score (flash
orders by the model's choice) still leaves ranks that agree with what it returned.

Example:
    >>> from llama_index.core.schema import NodeWithScore, TextNode
    >>> nodes = [NodeWithScore(node=TextNode(text=t), score=s) for t, s in (("a", 0.9), ("b", 0.4), ("c", None))]
    >>> [(n.node.metadata["article_rank"], n.node.metadata["normalized_rank"], n.node.metadata["rerank_score"])
    ...  for n in assign_ranks(nodes)]
    [(0, 0.0, 0.9), (1, 0.5, 0.4), (2, 1.0, 0.0)]
    >>> nodes[0].node.metadata  # the inputs are left as they were
    {}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.schema import NodeWithScore

from ragidx.article import ARTICLE_RANK, NORMALIZED_RANK, RERANK_SCORE

__all__ = ["RANK_KEYS", "assign_ranks", "rank_fields", "ranks_of"]

RANK_KEYS = (ARTICLE_RANK, NORMALIZED_RANK, RERANK_SCORE)
"""The metadata keys ``assign_ranks`` writes (kept out of what a model or an embedding reads)."""


def rank_fields(rank: int, count: int, score: float | None) -> dict[str, Any]:
    """The rank metadata of the ``rank``-th (0-based) of ``count`` ordered results with this score.

    Example:
        >>> rank_fields(1, 3, 0.25)
        {'article_rank': 1, 'normalized_rank': 0.5, 'rerank_score': 0.25}
    """
    if not 0 <= rank < count:
        raise ValueError(f"rank {rank} is outside 0..{count - 1}: a rank is a position in the {count} results")
    last = count - 1
    return {
        ARTICLE_RANK: rank,
        NORMALIZED_RANK: rank / last if last > 0 else 0.0,
        RERANK_SCORE: 0.0 if score is None else float(score),
    }


def assign_ranks(nodes: Sequence[NodeWithScore]) -> list[NodeWithScore]:
    """New nodes, in the same order, whose metadata carries ranks by that order (see the module docstring).

    The inputs are not changed: each output node is a copy with its metadata updated and the rank keys added
    to its excluded LLM and embedding metadata keys (a model reads the text and the title, not the ranks).
    """
    out = []
    for rank, node in enumerate(nodes):
        inner = node.node
        meta = {**inner.metadata, **rank_fields(rank, len(nodes), node.score)}
        copy = inner.model_copy(
            update={
                "metadata": meta,
                "excluded_llm_metadata_keys": _with_keys(inner.excluded_llm_metadata_keys),
                "excluded_embed_metadata_keys": _with_keys(inner.excluded_embed_metadata_keys),
            }
        )
        out.append(NodeWithScore(node=copy, score=node.score))
    return out


def ranks_of(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The rank fields present in ``metadata`` (to carry a node's ranks over to its ``Article``)."""
    return {k: metadata[k] for k in RANK_KEYS if k in metadata}


def _with_keys(keys: Sequence[str]) -> list[str]:
    return [*keys, *(k for k in RANK_KEYS if k not in keys)]
