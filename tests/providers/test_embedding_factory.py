from __future__ import annotations

from ragidx.config import Settings
from ragidx.providers.embedding_factory import build_embed_model
from ragidx.providers.embeddings import LocalEmbedding


def test_build_embed_model_keeps_settings() -> None:
    emb = build_embed_model(Settings())
    assert emb.model_name == "minilm" and emb._model is None
    assert emb.backend in ("onnx", "torch")


def test_a_named_sentence_transformers_model_is_run_by_local_embedding() -> None:
    emb = build_embed_model(Settings(embed_model="/some/folder", embed_batch_size=7))
    assert isinstance(emb, LocalEmbedding)
    assert emb.model_name == "/some/folder" and emb.embed_batch_size == 7 and emb._model is None
