from __future__ import annotations

from pathlib import Path

from ragidx.article import Article
from ragidx.config import Settings
from ragidx.dashboard.examples import example_question, example_titles
from tests.dashboard.fakes import make_engine


def test_examples_are_public_titled_articles_spread_over_the_knowledge_base(tmp_path: Path) -> None:
    articles = [Article(f"kb-{i:02d}", f"Topic {i:02d}", "", f"Text about topic {i}.") for i in range(12)]
    articles[0] = Article("kb-00", "Salaries", "", "Secret salary bands.", metadata={"allowed": ["group:hr"]})
    articles[1] = Article("kb-01", "kb-01", "", "An article titled with its own id.")
    with make_engine(Settings(data_dir=tmp_path)) as engine:
        assert example_titles(engine.article_store) == []  # an empty knowledge base offers none
        engine.ingest(articles)
        titles = example_titles(engine.article_store)
        assert example_titles(engine.article_store) == titles  # the same every time
        assert example_titles(engine.article_store, n=2) == ["Topic 02", "Topic 11"]
    assert titles == ["Topic 02", "Topic 05", "Topic 08", "Topic 11"]  # first to last, evenly
    assert example_question("Page Numbers") == "What does “Page Numbers” cover?"
