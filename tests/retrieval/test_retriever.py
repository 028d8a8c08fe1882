from __future__ import annotations

import asyncio
import re
from dataclasses import replace
from pathlib import Path

import pytest
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent

from ragidx.article import ARTICLE_RANK, MATCHED_CHUNKS, NORMALIZED_RANK, RERANK_SCORE
from ragidx.retrieval.article_grouper import ArticlesGroupedEvent
from ragidx.retrieval.flash import FlashReranker
from ragidx.retrieval.offline_reranker import OfflineChunkReranker
from ragidx.retrieval.retriever import CHAIN_RANK, CHAIN_SCORE, ArticleRetriever
from tests.fakes.scripted_llm import ScriptedLLM
from tests.retrieval.helpers import KB, build_kb


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return build_kb(tmp_path_factory.mktemp("kb"))


def make(kb, **kwargs) -> ArticleRetriever:  # type: ignore[no-untyped-def]
    chunks, articles, embed = kb
    return ArticleRetriever(chunks, articles, embed, **kwargs)


def test_full_chain_returns_whole_ranked_articles(kb) -> None:  # type: ignore[no-untyped-def]
    retriever = make(kb, reranker=OfflineChunkReranker(), top_k=3)
    articles = retriever.retrieve("how do I insert a table in Writer")
    assert articles[0].kb_id == "tables"
    assert len(articles) <= 3 and len({a.kb_id for a in articles}) == len(articles)
    full = {a.kb_id: a for a in KB}
    for rank, a in enumerate(articles):
        assert a.content == full[a.kb_id].content  # uncompressed, whole
        assert a.metadata[ARTICLE_RANK] == rank
        assert 0.0 <= a.metadata[NORMALIZED_RANK] <= 1.0
        assert a.metadata[MATCHED_CHUNKS]
    scores = [a.metadata[RERANK_SCORE] for a in articles]
    assert scores == sorted(scores, reverse=True)
    assert articles[0].metadata[NORMALIZED_RANK] == 0.0


def test_top_k_per_call_overrides_the_default(kb) -> None:  # type: ignore[no-untyped-def]
    retriever = make(kb, top_k=1, rerank_top_n=1)
    assert len(retriever.retrieve("insert a table")) == 1
    assert len(retriever.retrieve("insert a table", top_k=4)) == 4  # rerank keeps at least top_k chunks


def test_hybrid_results_differ_from_dense_ones(kb) -> None:  # type: ignore[no-untyped-def]
    # A store that silently ran dense for "hybrid" would give identical lists and scores.
    query = "docker volume create"
    dense = make(kb, mode="dense", candidate_chunks=6).search(query)
    hybrid = make(kb, mode="hybrid", alpha=0.5, candidate_chunks=6).search(query)
    text = make(kb, mode="text", candidate_chunks=6).search(query)
    assert text, "full-text search found nothing: is the FTS index built?"
    assert [(n.node.node_id, round(n.score or 0, 6)) for n in dense] != [
        (n.node.node_id, round(n.score or 0, 6)) for n in hybrid
    ]
    assert all(0.0 <= (n.score or 0) <= 1.0 for n in hybrid)  # fused scores, not raw BM25


def test_alpha_moves_hybrid_between_keyword_and_vector(kb) -> None:  # type: ignore[no-untyped-def]
    query = "insert image picture"
    keywordish = [n.node.node_id for n in make(kb, alpha=0.0).search(query)]
    text = [n.node.node_id for n in make(kb, mode="text").search(query)]
    assert keywordish == text


def test_async_retrieve_matches_sync(kb) -> None:  # type: ignore[no-untyped-def]
    retriever = make(kb, reranker=OfflineChunkReranker(), top_k=3)
    sync = retriever.retrieve("print the document")
    result = asyncio.run(retriever.aretrieve("print the document"))
    assert [a.kb_id for a in result] == [a.kb_id for a in sync]
    assert [a.metadata[RERANK_SCORE] for a in result] == [a.metadata[RERANK_SCORE] for a in sync]


def test_no_reranker_ranks_by_the_search_score(kb) -> None:  # type: ignore[no-untyped-def]
    articles = make(kb, reranker=None, top_k=2).retrieve("spelling")
    assert articles[0].kb_id == "spell"


class _Collect(BaseEventHandler):
    events: list = []

    def handle(self, event: object, **kwargs: object) -> None:
        self.events.append(event)


def test_rerank_and_grouping_events_reach_a_tracer(kb) -> None:  # type: ignore[no-untyped-def]
    handler = _Collect(events=[])
    root = get_dispatcher()
    root.add_event_handler(handler)
    try:
        make(kb, reranker=OfflineChunkReranker()).retrieve("insert a table")
    finally:
        root.event_handlers.remove(handler)
    names = {type(e).__name__ for e in handler.events}
    assert {"RetrievalStartEvent", "RetrievalEndEvent"} <= names
    assert any(isinstance(e, ReRankEndEvent) for e in handler.events)
    assert any(isinstance(e, ArticlesGroupedEvent) for e in handler.events)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "sparse"}, "mode must be one of"),
        ({"alpha": 1.5}, "alpha must be in [0, 1]"),
        ({"candidate_chunks": 0}, "candidate_chunks must be >= 1"),
        ({"top_k": 0}, "top_k must be >= 1"),
    ],
)
def test_bad_configuration_is_refused_early(kb, kwargs, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=re.escape(message)):
        make(kb, **kwargs)


def test_bad_calls_are_refused(kb) -> None:  # type: ignore[no-untyped-def]
    retriever = make(kb)
    with pytest.raises(ValueError, match="non-empty"):
        retriever.retrieve("  ")
    with pytest.raises(ValueError, match="top_k must be >= 1"):
        retriever.retrieve("table", top_k=0)


def test_constructor_touches_nothing(tmp_path: Path) -> None:
    class Exploding:
        def __getattr__(self, name: str) -> object:
            raise AssertionError(f"constructor used {name}")

    class ExplodingSource(Exploding):  # an article source (it has get), never called by the constructor
        def get(self, *args: object, **kwargs: object) -> object:
            raise AssertionError("constructor read articles")

    ArticleRetriever(Exploding(), ExplodingSource(), Exploding())  # type: ignore[arg-type]


# --- the article reranker step (flash) ---------------------------------------------------------------
def _flash_choice(messages, call):  # type: ignore[no-untyped-def]
    """A scripted final answer picking the candidates titled 'Table of contents' then 'Insert a table'."""
    text = "\n".join(m.content or "" for m in messages)
    ids = {title: int(n) for n, title in re.findall(r"\[ID:(\d+)\] [^|]*\|[^|]*\| (.+)", text)}
    picks = [ids["Table of contents"], ids["Insert a table"]]
    return '{"topics": [' + ", ".join(f'{{"id": {i}, "reason": "r{i}"}}' for i in picks) + "]}"


def test_article_reranker_orders_the_result_and_ranks_are_recomputed(kb) -> None:  # type: ignore[no-untyped-def]
    llm = ScriptedLLM([_flash_choice])
    flash = FlashReranker(llm, top_n=5)
    retriever = make(kb, reranker=OfflineChunkReranker(), top_k=3, article_reranker=flash, article_candidates=6)
    chain = make(kb, reranker=OfflineChunkReranker(), top_k=6).retrieve("insert a table of contents")

    articles = retriever.retrieve("insert a table of contents")

    shown = re.findall(r"\[ID:\d+\]", "\n".join(m.content or "" for m in llm.calls[0].messages))
    assert len(shown) == len(chain) == 6  # flash saw article_candidates articles, not top_k
    assert [a.kb_id for a in articles] == ["toc", "tables"]
    assert [a.metadata[ARTICLE_RANK] for a in articles] == [0, 1]
    assert [a.metadata[NORMALIZED_RANK] for a in articles] == [0.0, 1.0]
    assert articles[0].metadata[RERANK_SCORE] > articles[1].metadata[RERANK_SCORE]
    by_id = {a.kb_id: a for a in chain}
    assert articles[0].metadata[CHAIN_RANK] == by_id["toc"].metadata[ARTICLE_RANK]
    assert articles[0].metadata[CHAIN_SCORE] == by_id["toc"].metadata[RERANK_SCORE]
    assert articles[0].metadata["flash_reason"].startswith("r")
    assert articles[0].content == by_id["toc"].content and articles[0].url == by_id["toc"].url


def test_article_reranker_caps_at_top_k_and_honours_nothing_relevant(kb) -> None:  # type: ignore[no-untyped-def]
    flash = FlashReranker(ScriptedLLM([_flash_choice, '{"topics": []}']), top_n=5)
    retriever = make(kb, top_k=1, article_reranker=flash, article_candidates=6)
    assert [a.kb_id for a in retriever.retrieve("insert a table of contents")] == ["toc"]
    assert retriever.retrieve("insert a table of contents") == []


def test_async_article_reranker_matches_sync(kb) -> None:  # type: ignore[no-untyped-def]
    retriever = make(kb, top_k=3, article_reranker=FlashReranker(ScriptedLLM([_flash_choice], cycle=True)))
    sync = retriever.retrieve("insert a table of contents")
    assert [a.kb_id for a in asyncio.run(retriever.aretrieve("insert a table of contents"))] == [a.kb_id for a in sync]


def test_a_failing_flash_model_still_returns_the_chain_top_k(kb) -> None:  # type: ignore[no-untyped-def]
    flash = FlashReranker(ScriptedLLM([RuntimeError("502 bad gateway")]), top_n=3)
    retriever = make(kb, top_k=3, article_reranker=flash, article_candidates=6)
    chain = make(kb, top_k=3).retrieve("insert a table")
    articles = retriever.retrieve("insert a table")
    assert [a.kb_id for a in articles] == [a.kb_id for a in chain]
    assert {a.metadata["flash_decision"] for a in articles} == {"api_error"}


def test_a_flash_excerpt_becomes_the_articles_content_marked_with_where_the_whole_is(tmp_path: Path) -> None:
    filler = "".join(f"Tables paragraph {i} says little about tables.\n\n" for i in range(60))
    whole = filler + "You can also draw a table with the mouse.\n\nThe end of the tables article."
    big = replace(KB[0], content=whole)  # "tables", now a long article
    kb = build_kb(tmp_path, [big, *KB[1:]])

    def excerpt_of_tables(messages, call):  # type: ignore[no-untyped-def]
        text = "\n".join(m.content or "" for m in messages)
        ids = {title: int(n) for n, title in re.findall(r"\[ID:(\d+)\] [^|]*\|[^|]*\| (.+)", text)}
        excerpt = "You can also draw a table with the mouse."
        return f'{{"topics": [{{"id": {ids["Insert a table"]}, "reason": "r", "excerpt": "{excerpt}"}}]}}'

    flash = FlashReranker(ScriptedLLM([excerpt_of_tables]), top_n=3, excerpt_threshold_chars=1000)
    retriever = make(kb, reranker=OfflineChunkReranker(), top_k=3, article_reranker=flash, article_candidates=6)

    (article,) = retriever.retrieve("insert a table")

    assert article.kb_id == "tables" and article.url == "https://kb/tables"
    assert article.content.startswith('[Excerpt: the passages of "Insert a table"')
    assert "kb_id tables, https://kb/tables]" in article.content
    assert article.content.endswith("You can also draw a table with the mouse.")
    assert "paragraph 3 " not in article.content and len(article.content) < len(whole) / 5
    assert article.metadata["flash_excerpt_of_chars"] == len(whole)
    assert "flash_excerpt" not in article.metadata  # not twice in the prompt
    assert "matched_spans" not in article.metadata  # offsets into the whole article
