"""Test helpers for the retrieval chain: chunk nodes, an in-memory article source, a small KB."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from llama_index.core import Document, VectorStoreIndex
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import NodeWithScore, TextNode

from ingestion.pipeline import Ingestor
from ragidx.article import Article
from ragidx.stores.access import Principal, allowed_of
from ragidx.stores.article_store import ArticleStore
from ragidx.stores.lancedb_store import LanceDBChunkStore
from tests.fakes.hash_embedding import HashEmbedding


def chunk(kb_id: str, n: int, score: float | None, text: str | None = None, title: str = "") -> NodeWithScore:
    """Chunk ``n`` of article ``kb_id`` with a search score."""
    meta = {"kb_id": kb_id, "chunk_no": n, "title": title or f"Title {kb_id}"}
    return NodeWithScore(
        node=TextNode(id_=f"{kb_id}#{n}", text=text or f"chunk {n} of {kb_id}", metadata=meta), score=score
    )


def snapshot(nodes: Sequence[NodeWithScore]) -> list[tuple[str, float | None, dict, list[str], list[str]]]:
    """Everything a postprocessor could mutate, deep-copied, to compare before and after."""
    return [
        (
            n.node.node_id,
            n.score,
            copy.deepcopy(dict(n.node.metadata)),
            list(n.node.excluded_llm_metadata_keys),
            list(n.node.excluded_embed_metadata_keys),
        )
        for n in nodes
    ]


class DictArticles:
    """An article source backed by a dict; records what was asked for, and as whom (the principal's rule)."""

    def __init__(self, articles: Sequence[Article]) -> None:
        self.articles = {a.kb_id: a for a in articles}
        self.requests: list[list[str]] = []
        self.principals: list[Principal | None] = []

    def get(self, kb_ids: Sequence[str], *, principal: Principal | None = None) -> Mapping[str, Article]:
        self.requests.append(list(kb_ids))
        self.principals.append(principal)
        return {
            k: self.articles[k]
            for k in kb_ids
            if k in self.articles and (principal is None or principal.may_read(allowed_of(self.articles[k].metadata)))
        }


def article(kb_id: str, content: str = "", title: str = "") -> Article:
    return Article(kb_id, title or f"Title {kb_id}", f"https://kb/{kb_id}", content or f"full text of {kb_id}")


KB = [
    Article(
        "tables",
        "Insert a table",
        "https://kb/tables",
        "To insert a table in Writer, choose Table - Insert Table. Set the number of rows and columns.\n\n"
        "You can also draw a table with the mouse.",
    ),
    Article(
        "toc",
        "Table of contents",
        "https://kb/toc",
        "A table of contents lists headings. Choose Insert - Table of Contents and Index to add one.",
    ),
    Article(
        "print",
        "Printing a document",
        "https://kb/print",
        "Choose File - Print to print the document. Select the printer and the page range.",
    ),
    Article(
        "volumes",
        "Docker volumes",
        "https://kb/volumes",
        "Volumes keep container data after the container is removed. Use docker volume create.",
    ),
    Article(
        "images",
        "Insert an image",
        "https://kb/images",
        "Choose Insert - Image to place a picture from a file into the document.",
    ),
    Article(
        "spell",
        "Spellcheck",
        "https://kb/spell",
        "Tools - Spelling checks the document for misspelled words and suggests corrections.",
    ),
]


def build_kb(folder: Path, articles: Sequence[Article] = KB) -> tuple[LanceDBChunkStore, ArticleStore, HashEmbedding]:
    """A real LanceDB chunk store + article store with ``articles`` ingested by the real pipeline."""
    embed = HashEmbedding(dim=256)
    chunks = LanceDBChunkStore(uri=folder / "lancedb", table_name="Kb")
    store = ArticleStore(folder / "articles.sqlite")
    Ingestor(chunks, store, embed, chunk_tokens=64, chunk_overlap=8).ingest(list(articles), source="test")
    return chunks, store, embed


SAMPLE_KB = Path(__file__).resolve().parents[2] / "ragidx" / "data" / "kb" / "libreoffice_en_sample.jsonl"


def sample_documents(n: int = 30) -> list[Document]:
    """The first ``n`` real LibreOffice articles of the bundled sample as LlamaIndex ``Document``s, as a LlamaIndex
    user makes them: the article id as the document id, title and url in the metadata, no ragidx ``kb_id``."""
    rows = [json.loads(line) for line in SAMPLE_KB.read_text(encoding="utf-8").splitlines()[:n]]
    return [Document(id_=r["id"], text=r["text"], metadata={"title": r["title"], "url": r["url"]}) for r in rows]


def stock_index(documents: Sequence[Document], chunk_size: int = 128) -> VectorStoreIndex:
    """A stock ``VectorStoreIndex`` (in memory) over ``documents``, split small so an article spans several
    chunks, embedded with the hashing fake (fast and deterministic)."""
    splitter = SentenceSplitter(chunk_size=chunk_size, chunk_overlap=16)
    return VectorStoreIndex.from_documents(documents, embed_model=HashEmbedding(dim=256), transformations=[splitter])
