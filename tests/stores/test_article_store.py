from __future__ import annotations

from pathlib import Path

from ragidx.article import Article
from ragidx.stores.article_store import INDEXED, PENDING, ArticleStore


def test_ledger_tracks_pending_and_indexed_and_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "a.sqlite"
    store = ArticleStore(path)
    a = Article(
        "k1", "Title", "u", "Full text with ' quotes and ünïcode.", language="de", metadata={"source": "s"}
    )
    store.save_pending([a, Article("k2", "T2", "u2", "two")], source="src")
    assert sorted(store.pending_ids()) == ["k1", "k2"]
    store.mark_indexed({"k1": 3})
    store.close()

    again = ArticleStore(path)
    assert again.get(["k1"])["k1"] == a
    assert again.states(["k1", "k2", "nope"]) == {
        "k1": (a.content_hash, INDEXED),
        "k2": (again.states(["k2"])["k2"][0], PENDING),
    }
    assert again.count() == 2 and again.count(INDEXED) == 1 and again.total_chunks() == 3
    assert sorted(again.ids_for_source("src")) == ["k1", "k2"]
    again.delete(["k2"])
    assert again.get(["k2"]) == {} and again.count() == 1


def test_many_ids_are_batched(tmp_path: Path) -> None:
    store = ArticleStore(tmp_path / "a.sqlite")
    store.save_pending([Article(f"k{i}", "t", "u", "x") for i in range(1200)])
    assert len(store.get([f"k{i}" for i in range(1200)])) == 1200
    assert len(store.states([f"k{i}" for i in range(1200)])) == 1200
