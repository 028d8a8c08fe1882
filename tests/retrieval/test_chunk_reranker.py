from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Sequence

import pytest
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.schema import NodeWithScore, QueryBundle

from ragidx.article import RERANK_SCORE
from ragidx.retrieval.chunk_reranker import RETRIEVAL_SCORE, ChunkReranker, chunk_text
from tests.retrieval.helpers import chunk, snapshot


class Scripted(ChunkReranker):
    """Returns a fixed list of (index, score) pairs, in the order given."""

    pairs: list[tuple[int, float]] = []

    def _score(self, query: str, nodes: Sequence[NodeWithScore]) -> list[tuple[int, float]]:
        return list(self.pairs)


def three() -> list[NodeWithScore]:
    return [chunk("a", 0, 0.9), chunk("b", 0, 0.5), chunk("c", 0, 0.1)]


def test_results_map_back_by_index_not_by_position() -> None:
    # The scorer answers best first: index 2 is the best, then 0; index 1 is absent.
    out = Scripted(pairs=[(2, 7.0), (0, 3.0)]).postprocess_nodes(three(), query_str="q")
    assert [n.node.node_id for n in out] == ["c#0", "a#0"]
    assert [n.score for n in out] == [7.0, 3.0]


def test_retrieval_and_rerank_scores_sit_side_by_side() -> None:
    out = Scripted(pairs=[(0, 0.2), (1, 0.8), (2, 0.5)]).postprocess_nodes(three(), query_str="q")
    by_id = {n.node.node_id: n.node.metadata for n in out}
    assert by_id["b#0"][RETRIEVAL_SCORE] == 0.5 and by_id["b#0"][RERANK_SCORE] == 0.8
    assert by_id["a#0"][RETRIEVAL_SCORE] == 0.9 and by_id["a#0"][RERANK_SCORE] == 0.2


def test_a_second_rerank_keeps_the_original_retrieval_score() -> None:
    once = Scripted(pairs=[(0, 0.2), (1, 0.8), (2, 0.5)]).postprocess_nodes(three(), query_str="q")
    twice = Scripted(pairs=[(0, 5.0), (1, 4.0), (2, 3.0)]).postprocess_nodes(once, query_str="q")
    assert twice[0].node.node_id == "b#0"
    assert twice[0].node.metadata[RETRIEVAL_SCORE] == 0.5
    assert twice[0].node.metadata[RERANK_SCORE] == 5.0


def test_input_nodes_are_not_mutated() -> None:
    nodes = three()
    before = snapshot(nodes)
    out = Scripted(pairs=[(0, 0.2), (1, 0.8), (2, 0.5)]).postprocess_nodes(nodes, query_str="q")
    assert snapshot(nodes) == before
    assert all(o.node is not n.node for o in out for n in nodes)


def test_new_score_keys_are_hidden_from_llm_and_embedding_text() -> None:
    out = Scripted(pairs=[(0, 1.0)]).postprocess_nodes(three(), query_str="q")
    meta_keys = out[0].node.excluded_llm_metadata_keys
    assert RETRIEVAL_SCORE in meta_keys and RERANK_SCORE in meta_keys
    assert RERANK_SCORE in out[0].node.excluded_embed_metadata_keys


def test_top_n_keeps_the_best() -> None:
    out = Scripted(top_n=1, pairs=[(0, 0.2), (1, 0.8), (2, 0.5)]).postprocess_nodes(three(), query_str="q")
    assert [n.node.node_id for n in out] == ["b#0"]


def test_out_of_range_and_duplicate_indices_are_handled() -> None:
    out = Scripted(pairs=[(5, 9.0), (-1, 9.0), (1, 0.3), (1, 0.6)]).postprocess_nodes(three(), query_str="q")
    assert [(n.node.node_id, n.score) for n in out] == [("b#0", 0.6)]


def test_nan_scores_sink_to_the_bottom() -> None:
    out = Scripted(pairs=[(0, math.nan), (1, 0.1), (2, 0.2)]).postprocess_nodes(three(), query_str="q")
    assert [n.node.node_id for n in out] == ["c#0", "b#0", "a#0"]


def test_equal_scores_keep_the_incoming_order() -> None:
    out = Scripted(pairs=[(2, 1.0), (1, 1.0), (0, 1.0)]).postprocess_nodes(three(), query_str="q")
    assert [n.node.node_id for n in out] == ["a#0", "b#0", "c#0"]


def test_missing_query_says_what_to_do() -> None:
    with pytest.raises(ValueError, match=re.escape("query_str=")):
        Scripted(pairs=[]).postprocess_nodes(three())


def test_empty_input_returns_empty_without_scoring() -> None:
    class Exploding(ChunkReranker):
        def _score(self, query: str, nodes: Sequence[NodeWithScore]) -> list[tuple[int, float]]:
            raise AssertionError("must not be called")

    assert Exploding().postprocess_nodes([], query_str="q") == []


def test_async_path_gives_the_same_result() -> None:
    reranker = Scripted(pairs=[(2, 7.0), (0, 3.0), (1, 5.0)])
    sync = reranker.postprocess_nodes(three(), query_str="q")
    result = asyncio.run(reranker.apostprocess_nodes(three(), query_bundle=QueryBundle("q")))
    assert [(n.node.node_id, n.score) for n in result] == [(n.node.node_id, n.score) for n in sync]


class _Collect(BaseEventHandler):
    events: list = []

    def handle(self, event: object, **kwargs: object) -> None:
        self.events.append(event)


def test_rerank_start_and_end_events_are_emitted() -> None:
    handler = _Collect(events=[])
    root = get_dispatcher()
    root.add_event_handler(handler)
    try:
        Scripted(top_n=2, pairs=[(0, 0.2), (1, 0.8), (2, 0.5)]).postprocess_nodes(three(), query_str="q")
    finally:
        root.event_handlers.remove(handler)
    starts = [e for e in handler.events if isinstance(e, ReRankStartEvent)]
    ends = [e for e in handler.events if isinstance(e, ReRankEndEvent)]
    assert len(starts) == 1 and len(ends) == 1
    assert starts[0].top_n == 2 and len(starts[0].nodes) == 3
    assert [n.node.node_id for n in ends[0].nodes] == ["b#0", "c#0"]


def test_chunk_text_is_title_and_text_without_ids_or_urls() -> None:
    text = chunk_text(chunk("a", 0, 0.1, text="body", title="Head"))
    assert text == "Head\n\nbody"
    assert "kb_id" not in text
