"""assign_ranks: the one rank rule of every reordering stage."""

from __future__ import annotations

import pytest
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode

from ragidx.retrieval.ranks import RANK_KEYS, assign_ranks, rank_fields, ranks_of
from tests.retrieval.helpers import snapshot


def nodes(*scores: float | None) -> list[NodeWithScore]:
    return [
        NodeWithScore(
            node=TextNode(id_=f"n{i}", text=f"text {i}", metadata={"title": f"T{i}", "article_rank": 9}), score=s
        )
        for i, s in enumerate(scores)
    ]


def test_ranks_follow_the_order_given_not_the_scores() -> None:
    given = nodes(0.2, 0.9, None, 0.5)  # a stage that orders by something else (flash: the model's choice)

    out = assign_ranks(given)

    assert [n.node.node_id for n in out] == ["n0", "n1", "n2", "n3"]
    assert [n.node.metadata["article_rank"] for n in out] == [0, 1, 2, 3]
    assert [n.node.metadata["normalized_rank"] for n in out] == pytest.approx([0.0, 1 / 3, 2 / 3, 1.0])
    assert [n.node.metadata["rerank_score"] for n in out] == [0.2, 0.9, 0.0, 0.5]
    assert [n.score for n in out] == [0.2, 0.9, None, 0.5]


def test_a_lone_node_is_rank_zero_and_nothing_stays_nothing() -> None:
    (only,) = assign_ranks(nodes(0.3))
    assert (only.node.metadata["article_rank"], only.node.metadata["normalized_rank"]) == (0, 0.0)
    assert assign_ranks([]) == []


def test_inputs_are_untouched_and_the_model_does_not_read_the_ranks() -> None:
    given = nodes(0.9, 0.1)
    before = snapshot(given)

    out = assign_ranks(given)

    assert snapshot(given) == before
    for node in out:
        assert set(RANK_KEYS) <= set(node.node.excluded_llm_metadata_keys)
        assert set(RANK_KEYS) <= set(node.node.excluded_embed_metadata_keys)
        assert "rank" not in node.node.get_content(metadata_mode=MetadataMode.LLM)
        assert "T" in node.node.get_content(metadata_mode=MetadataMode.LLM)  # the title still is


def test_rank_fields_and_ranks_of() -> None:
    assert rank_fields(0, 1, None) == {"article_rank": 0, "normalized_rank": 0.0, "rerank_score": 0.0}
    assert ranks_of({"article_rank": 2, "title": "x"}) == {"article_rank": 2}
    with pytest.raises(ValueError, match="outside"):
        rank_fields(3, 3, 1.0)
