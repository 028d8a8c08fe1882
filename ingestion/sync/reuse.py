"""Vectors kept when an article moves: the embedding step of ingestion, answering from vectors already stored.

A file moved to another folder is a new article id with the old text. Its chunks are the old chunks (chunking is
deterministic) and what is embedded of each (its title and text) is the same, so the vectors the chunk store holds
for the old article are the right ones. :class:`ReusedEmbedding` stands in for the embedding model in one
ingestor's pipeline: a chunk whose embedded text it was given a vector for gets that vector, any other is embedded
by the model. Ingestion runs as always (new id, new url and place, ledger, permissions): only the embedding is
spared.

A chunk store hands its vectors back through ``article_vectors(kb_ids)`` (``(title, text, vector)`` per chunk);
a store without it (Weaviate today) gives none, and a moved file is embedded again there.

Example:
    >>> from llama_index.core.schema import TextNode
    >>> text = embedded_text("Tables", "Insert a table.")
    >>> text == TextNode(text="Insert a table.", metadata={"title": "Tables"}).get_content(metadata_mode="embed")
    True
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.schema import BaseNode, MetadataMode, TextNode, TransformComponent
from pydantic import ConfigDict, Field

__all__ = ["ReusedEmbedding", "embedded_text", "stored_vectors"]

logger = logging.getLogger(__name__)


def embedded_text(title: str, text: str) -> str:
    """What ingestion embeds of a chunk with this title and text (its title is the only metadata embedded)."""
    return TextNode(text=text, metadata={"title": title}).get_content(metadata_mode=MetadataMode.EMBED)


def stored_vectors(chunk_store: Any, kb_ids: Sequence[str]) -> dict[str, list[float]]:
    """Embedded text → vector of every stored chunk of these articles; empty where the store cannot say."""
    read = getattr(chunk_store, "article_vectors", None)
    if read is None or not kb_ids:
        return {}
    try:
        rows = read(list(dict.fromkeys(kb_ids)))
    except Exception:  # reusing is an optimisation: embedding again is always right
        logger.warning("could not read stored vectors; moved articles are embedded again", exc_info=True)
        return {}
    return {embedded_text(str(title), str(text)): [float(x) for x in vector] for title, text, vector in rows}


class ReusedEmbedding(TransformComponent):
    """The embedding step of a pipeline: known texts get their stored vector, the others the model's.

    ``reused`` counts the chunks that were not embedded.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: Any = Field(description="The embedding model (a LlamaIndex BaseEmbedding) for texts not known.")
    known: dict[str, list[float]] = Field(default_factory=dict, description="Embedded text → its stored vector.")
    reused: int = 0

    @classmethod
    def around(cls, model: Any, known: Mapping[str, list[float]]) -> ReusedEmbedding:
        return cls(model=model, known=dict(known))

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        texts = [node.get_content(metadata_mode=MetadataMode.EMBED) for node in nodes]
        missing = [i for i, t in enumerate(texts) if t not in self.known]
        vectors = self.model.get_text_embedding_batch([texts[i] for i in missing]) if missing else []
        fresh = dict(zip(missing, vectors, strict=True))
        for i, node in enumerate(nodes):
            node.embedding = fresh[i] if i in fresh else list(self.known[texts[i]])
        self.reused += len(nodes) - len(missing)
        return nodes
