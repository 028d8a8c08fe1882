from __future__ import annotations

import pytest
from llama_index.core.schema import NodeWithScore

from ragidx.article import RERANK_SCORE
from ragidx.retrieval.chunk_reranker import RETRIEVAL_SCORE
from ragidx.retrieval.offline_reranker import OfflineChunkReranker, candidate_features
from ragidx.terms import terms
from tests.retrieval.helpers import chunk, snapshot


def test_terms_lowercase_drop_stop_words_and_stem_both_scripts() -> None:
    assert terms("The Proteins were BINDING") == ["protein", "bind"]
    assert terms("Вставка таблиц в документы") == ["вставк", "таблиц", "документ"]


def test_title_match_lifts_a_chunk_the_search_ranked_lower() -> None:
    nodes = [
        chunk("a", 0, 0.60, text="General notes about documents and their layout.", title="Page layout"),
        chunk("b", 0, 0.55, text="Choose the menu entry and confirm.", title="Insert a table"),
        chunk("c", 0, 0.10, text="Unrelated words.", title="Printing"),
    ]
    out = OfflineChunkReranker().postprocess_nodes(nodes, query_str="insert a table")
    assert out[0].node.node_id == "b#0"


def with_language(node: NodeWithScore, language: str) -> NodeWithScore:
    meta = {**node.node.metadata, "language": language}
    return NodeWithScore(node=node.node.model_copy(update={"metadata": meta}), score=node.score)


def test_candidates_and_query_are_stemmed_in_their_own_language() -> None:
    # English Snowball makes "tabell" of "Tabelle" but leaves "tabellen" whole; German reduces both to "tabell".
    nodes = [
        with_language(chunk("en", 0, 0.50, text="Tables are inserted from the menu.", title="Words"), "en"),
        with_language(chunk("de", 0, 0.45, text="Die Tabellen wurden eingefügt.", title="Dokumente"), "de"),
    ]
    query = "Tabelle einfügen"
    out = OfflineChunkReranker(retrieval_weight=0.1, title_weight=0.0).postprocess_nodes(nodes, query_str=query)
    assert out[0].node.node_id == "de#0"
    plain = candidate_features(query, ["Words", "Dokumente"], [n.node.get_content() for n in nodes], [0.5, 0.45])
    german = candidate_features(
        query,
        ["Words", "Dokumente"],
        [n.node.get_content() for n in nodes],
        [0.5, 0.45],
        languages=["en", "de"],
        query_language="de",
    )
    assert german.lexical[1] > 0.0 == plain.lexical[1]


def test_exact_phrase_beats_scattered_words() -> None:
    phrase = "Vitamin D deficiency raises the risk of fractures in the elderly population overall."
    scattered = "Deficiency of iron was studied; vitamin intake and fractures risk were measured in D group."
    nodes = [chunk("a", 0, 0.5, text=scattered, title="X"), chunk("b", 0, 0.5, text=phrase, title="Y")]
    out = OfflineChunkReranker(lexical_weight=0.0, title_weight=0.0, phrase_weight=1.0).postprocess_nodes(
        nodes, query_str="vitamin D deficiency fractures"
    )
    assert out[0].node.node_id == "b#0"


def test_retrieval_score_alone_keeps_the_search_order() -> None:
    nodes = [chunk(k, 0, s) for k, s in (("a", 0.2), ("b", 0.9), ("c", 0.5))]
    reranker = OfflineChunkReranker(lexical_weight=0.0, title_weight=0.0, phrase_weight=0.0)
    out = reranker.postprocess_nodes(nodes, query_str="anything")
    assert [n.node.node_id for n in out] == ["b#0", "c#0", "a#0"]
    assert out[0].node.metadata[RETRIEVAL_SCORE] == 0.9
    assert out[0].node.metadata[RERANK_SCORE] == pytest.approx(1.0)


def test_scores_are_bounded_by_the_sum_of_weights_and_deterministic() -> None:
    nodes = [chunk(str(i), 0, i / 10, text=f"table insert row {i} column", title=f"T{i}") for i in range(8)]
    reranker = OfflineChunkReranker()
    first = reranker.postprocess_nodes(nodes, query_str="insert table column")
    second = reranker.postprocess_nodes(nodes, query_str="insert table column")
    total = sum(reranker.weights.values())
    assert all(0.0 <= (n.score or 0) <= total for n in first)
    assert [(n.node.node_id, n.score) for n in first] == [(n.node.node_id, n.score) for n in second]


def test_inputs_are_not_mutated() -> None:
    nodes = [chunk("a", 0, 0.6, text="x y z"), chunk("b", 0, 0.5, text="insert table")]
    before = snapshot(nodes)
    OfflineChunkReranker().postprocess_nodes(nodes, query_str="insert table")
    assert snapshot(nodes) == before


def test_features_handle_missing_scores_and_stop_word_queries() -> None:
    f = candidate_features("the of and", ["A", "B"], ["x", "y"], [None, float("nan")])
    assert f.retrieval == [0.0, 0.0]
    assert f.lexical == [0.0, 0.0] and f.title == [0.0, 0.0] and f.phrase == [0.0, 0.0]


def test_a_term_in_every_candidate_counts_less_than_a_rare_one() -> None:
    titles = ["", "", ""]
    texts = ["cell protein", "cell membrane", "cell nucleus"]
    f = candidate_features("cell protein", titles, texts, [0.1, 0.1, 0.1])
    assert f.lexical[0] > f.lexical[1] == f.lexical[2] > 0.0
