"""A deterministic embedding that really separates texts: hashed bag of word stems, L2-normalized.

Texts that share words get a high cosine, unrelated texts a low one, so ranking can be tested
without a model (LlamaIndex's ``MockEmbedding`` returns one vector for every text).

Example:
    >>> emb = HashEmbedding(dim=64)
    >>> a, b, c = (emb.get_text_embedding(t) for t in ("insert a table", "table insert", "print page"))
    >>> sum(x * y for x, y in zip(a, b)) > sum(x * y for x, y in zip(a, c))
    True
"""

from __future__ import annotations

import hashlib
import math
import re

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from pydantic import Field, PrivateAttr

_WORD = re.compile(r"\w+")


class HashEmbedding(BaseEmbedding):
    dim: int = Field(default=128)
    calls: int = 0
    reads: frozenset[str] | None = Field(default=None, description="The languages it claims to read (None: unknown).")
    _texts_embedded: list[str] = PrivateAttr(default_factory=list)

    def __init__(self, dim: int = 128, **kwargs: object) -> None:
        super().__init__(model_name="hash", dim=dim, **kwargs)

    @property
    def languages(self) -> frozenset[str] | None:
        return self.reads

    @property
    def texts_embedded(self) -> list[str]:
        return self._texts_embedded

    def _vector(self, text: str) -> Embedding:
        vec = [0.0] * self.dim
        for word in _WORD.findall(text.lower()):
            stem = word[:5]
            h = int.from_bytes(hashlib.blake2b(stem.encode(), digest_size=8).digest(), "little")
            vec[h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
        norm = math.sqrt(sum(x * x for x in vec)) or 1.0
        return [x / norm for x in vec]

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._vector(query)

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> Embedding:
        self.calls += 1
        self._texts_embedded.append(text)
        return self._vector(text)
