"""DocstoreArticles: whole articles from a LlamaIndex docstore, as the grouper reads them."""

from __future__ import annotations

import pytest
from llama_index.core import Document
from llama_index.core.schema import NodeRelationship, NodeWithScore, RelatedNodeInfo, TextNode
from llama_index.core.storage.docstore import SimpleDocumentStore

from ragidx import ArticleGrouper, ArticleSource, DocstoreArticles
from ragidx.stores.access import Principal
from tests.retrieval.helpers import sample_documents, stock_index


def words(text: str) -> str:
    return " ".join(text.split())


def test_a_stock_index_s_documents_are_rebuilt_from_their_chunks() -> None:
    documents = sample_documents(12)
    index = stock_index(documents, chunk_size=96)
    assert all(d.doc_id not in index.docstore.docs for d in documents)  # a stock index keeps only the chunks

    articles = DocstoreArticles(index.docstore).get([d.doc_id for d in documents])

    assert isinstance(DocstoreArticles(index.docstore), ArticleSource)
    for document in documents:
        article = articles[document.doc_id]
        assert words(article.content) == words(document.text)
        assert (article.kb_id, article.title, article.url) == (
            document.doc_id,
            document.metadata["title"],
            document.metadata["url"],
        )
    assert len(index.docstore.get_ref_doc_info(documents[0].doc_id).node_ids) > 1  # type: ignore[union-attr]


def test_a_stored_document_is_read_whole_with_file_name_and_path() -> None:
    docstore = SimpleDocumentStore()
    meta = {"file_name": "guide.md", "file_path": "/kb/guide.md", "product": "writer"}
    docstore.add_documents([Document(id_="guide", text="# Guide\n\nAll of it.", metadata=meta)])

    article = DocstoreArticles(docstore).get(["guide", "missing"])

    assert list(article) == ["guide"]
    assert (article["guide"].title, article["guide"].url, article["guide"].content) == (
        "guide.md",
        "/kb/guide.md",
        "# Guide\n\nAll of it.",
    )
    assert article["guide"].metadata["product"] == "writer"


def _chunk(doc_id: str, n: int, text: str, **meta: object) -> TextNode:
    return TextNode(
        id_=f"{doc_id}-{n}",
        text=text,
        metadata=dict(meta),
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc_id)},
    )


def test_chunks_found_by_their_kb_id_metadata_and_joined_without_offsets() -> None:
    docstore = SimpleDocumentStore()
    parts = [
        _chunk("doc-1", 0, "Open the Format menu and choose Columns.", kb_id="lo-7", title="Columns"),
        _chunk("doc-1", 1, "choose Columns. Set the number of columns.", kb_id="lo-7", title="Columns"),
    ]
    docstore.add_documents(parts)  # filed under their document, whose metadata is the chunks'

    article = DocstoreArticles(docstore).get(["lo-7"])["lo-7"]

    assert article.content == "Open the Format menu and choose Columns. Set the number of columns."
    assert article.title == "Columns"


def test_a_document_s_allowed_readers_are_kept() -> None:
    docstore = SimpleDocumentStore()
    docstore.add_documents(
        [
            Document(id_="open", text="Everyone may read this."),
            Document(id_="hr", text="Salaries.", metadata={"allowed": ["group:hr"]}),
        ]
    )
    source = DocstoreArticles(docstore)

    assert list(source.get(["open", "hr"])) == ["open"]
    assert list(source.get(["open", "hr"], principal=Principal(groups=("hr",)))) == ["open", "hr"]


def test_the_grouper_groups_chunks_by_kb_id_metadata_over_a_docstore() -> None:
    docs = [
        Document(id_=f"file-{i}", text=d.text, metadata={**d.metadata, "kb_id": f"lo-{i}"})
        for i, d in enumerate(sample_documents(6))
    ]
    index = stock_index(docs)
    chunks = index.as_retriever(similarity_top_k=6).retrieve("pivot table")
    assert all(n.node.metadata["kb_id"].startswith("lo-") for n in chunks)

    out = ArticleGrouper(docstore=index.docstore).postprocess_nodes(chunks)

    by_kb = {d.metadata["kb_id"]: d for d in docs}
    assert out and all(n.node.node_id.startswith("lo-") for n in out)
    for node in out:
        assert words(node.node.get_content()) == words(by_kb[node.node.node_id].text)


def test_anything_but_a_docstore_is_refused_with_advice() -> None:
    with pytest.raises(TypeError, match=r"index\.docstore"):
        DocstoreArticles({"a": 1})  # type: ignore[arg-type]
    chunk = NodeWithScore(node=TextNode(text="x", metadata={"kb_id": "a"}), score=1.0)
    assert ArticleGrouper(docstore=SimpleDocumentStore()).postprocess_nodes([chunk]) == []


def test_an_empty_docstore_says_how_to_fill_it(caplog: pytest.LogCaptureFixture) -> None:
    assert DocstoreArticles(SimpleDocumentStore()).get(["a"]) == {}
    assert "store_nodes_override=True" in caplog.text
