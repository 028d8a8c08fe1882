"""A document's chunk is filed under the section that holds most of its text and names every section it spans.

Before, a chunk was filed under the section it starts in: the chunk after a heading begins with the overlap it
repeats from the section before (and often that section's last lines), so a table under a heading matched in a
chunk filed under the heading before it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ingestion.pipeline import Ingestor, spanned_sections
from ingestion.sources import read_source
from ragidx.article import SECTIONS
from ragidx.stores.article_store import ArticleStore
from ragidx.stores.filters import user_fields
from ragidx.stores.lancedb_store import LanceDBChunkStore
from tests.fakes.hash_embedding import HashEmbedding

INTRO = " ".join(f"Intro sentence {i} says the office opens at eight every weekday morning." for i in range(8))
ROWS = ["| New Year | 1 |", "| Easter | 2 |", "| May Day | 1 |", "| Midsummer | 2 |", "| Autumn | 1 |"]
TABLE = "\n".join(["| Holiday | Days off |", "| --- | --- |", *ROWS, "| Christmas | 3 |"])


def _ingested(tmp_path: Path) -> Ingestor:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "handbook.md").write_text(
        f"# Handbook\n\n## Hours\n\n{INTRO}\n\n## Holidays\n\n{TABLE}\n", encoding="utf-8"
    )
    store = tmp_path / "store"
    # chunks that overlap as ragidx's do (200 tokens, 32 shared), smaller: the one holding the table starts in Hours
    ingestor = Ingestor(
        LanceDBChunkStore(uri=store / "lancedb"), ArticleStore(store / "a.sqlite"), HashEmbedding(dim=32),
        chunk_tokens=100, chunk_overlap=40,
    )  # fmt: skip
    report = ingestor.ingest(read_source(docs), source="docs")
    assert report.new == 1 and ingestor.article_store.get(["handbook.md"])["handbook.md"].metadata[SECTIONS]
    return ingestor


def _nodes(tmp_path: Path) -> list[Any]:
    store = _ingested(tmp_path).vector_store
    table = store._open()
    assert table is not None
    ids = [r["id"] for r in table.to_lance().to_table(columns=["id"]).to_pylist()]
    return sorted(store.get_nodes(node_ids=ids), key=lambda n: n.metadata["chunk_no"])


def test_a_chunk_holding_a_sections_table_is_filed_under_it_and_names_the_sections_it_spans(tmp_path: Path) -> None:
    nodes = _nodes(tmp_path)
    [table] = [n for n in nodes if "| Midsummer | 2 |" in n.get_content()]
    before = table.get_content().partition("## Holidays")[0]
    assert "Intro sentence" in before  # it starts in Hours, most of it is Holidays
    assert len(table.get_content()) - len(before) > len(before)
    assert table.metadata["section"] == "Holidays" and table.metadata["heading_path"] == "Handbook > Holidays"
    assert table.metadata["location_url"].endswith("handbook.md#holidays")
    assert table.metadata["spanned_sections"] == ["Hours", "Holidays"]


def test_spanned_sections_counts_each_sections_characters() -> None:
    sections = [{"start": 0, "section": "A"}, {"start": 10, "section": "B"}, {"start": 20, "section": "C"}]
    assert [(s["section"], n) for s, n in spanned_sections(sections, 4, 16)] == [("A", 6), ("B", 6)]
    assert [(s["section"], n) for s, n in spanned_sections(sections, 25, 40)] == [("C", 15)]
    assert [(s["section"], n) for s, n in spanned_sections(sections, 10, 10)] == [("B", 0)]
    assert spanned_sections([], 0, 5) == []


def test_the_sections_a_chunk_spans_are_no_field_to_filter_on(tmp_path: Path) -> None:
    store = _ingested(tmp_path).vector_store
    assert "spanned_sections" in store.metadata_fields()  # stored with the chunk
    assert "spanned_sections" not in user_fields(store.metadata_fields())  # never offered as an article's field
