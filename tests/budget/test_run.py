from __future__ import annotations

import copy

from ragidx.article import Article, SearchResult
from ragidx.budget.run import ArticleTable
from ragidx.providers.tokenizer import TokenCounter
from tests.budget.helpers import article as article_dict


def article(kb_id: str, score: float, content: str) -> Article:
    return Article.from_dict(article_dict(kb_id, score, content))


def table(*calls: list[Article]) -> ArticleTable:
    return ArticleTable({f"c{i}": SearchResult(tuple(c)) for i, c in enumerate(calls)}, TokenCounter())


def unique(*calls: list[Article]) -> list[Article]:
    return [e.article for e in table(*calls).entries.values()]


def test_keeps_highest_score_copy_and_renormalizes() -> None:
    call1 = [article("a", 0.2, "A low"), article("b", 0.6, "B")]
    call2 = [article("c", 0.4, "C"), article("a", 0.9, "A high")]
    out = unique(call1, call2)
    assert [a.kb_id for a in out] == ["a", "b", "c"]
    assert out[0].content == "A high" and out[0].metadata["rerank_score"] == 0.9
    assert [a.metadata["normalized_rank"] for a in out] == [0.0, 0.5, 1.0]
    assert [a.metadata["article_rank"] for a in out] == [0, 1, 2]


def test_lone_article_is_rank_zero_and_empty_input() -> None:
    (only,) = unique([article("x", 0.1, "X")])
    assert only.metadata["normalized_rank"] == 0.0
    assert unique() == [] and unique([]) == []


def test_inputs_not_mutated() -> None:
    calls = [[article("a", 0.2, "A"), article("b", 0.9, "B")]]
    frozen = copy.deepcopy(calls)
    out = unique(*calls)
    assert calls == frozen
    assert out[0] is not calls[0][1] and out[0].metadata is not calls[0][1].metadata


def test_missing_scores_sort_last_and_missing_ids_never_merge() -> None:
    no_score = Article("n", "N", "", "N")
    anon1, anon2 = Article("", "", "", "same"), Article("", "", "", "same")
    entries = table([no_score, anon1, article("s", 0.1, "S")], [anon2]).entries
    assert list(entries) == ["s", "n", "#0:1", "#1:0"]
    assert "rerank_score" not in entries["n"].article.metadata
