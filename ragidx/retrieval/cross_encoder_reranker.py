"""CrossEncoderChunkReranker: a sentence-transformers CrossEncoder from a folder the user gives.

Bring-your-own weights (e.g. a copy of ``cross-encoder/ms-marco-MiniLM-L-6-v2``): ragidx ships none,
and none can be downloaded offline. The model loads on first use, on the CPU unless told otherwise.
A bi-encoder folder (like the bundled MiniLM) is *not* a cross-encoder: its classification head would
be untrained and score at random, so such a folder is refused.

Example:
    >>> reranker = CrossEncoderChunkReranker(model_path="/models/ms-marco-MiniLM-L-6-v2", top_n=30)
    >>> reranker.is_loaded
    False
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.schema import NodeWithScore

from ragidx.providers.extras import require_extra
from ragidx.retrieval.chunk_reranker import ChunkReranker, chunk_text

__all__ = ["CrossEncoderChunkReranker"]

logger = logging.getLogger(__name__)


class CrossEncoderChunkReranker(ChunkReranker):
    """Scores (query, chunk) pairs with a local CrossEncoder.

    Example:
        >>> CrossEncoderChunkReranker(model_path="/models/ce", batch_size=16).batch_size
        16
    """

    model_path: str = Field(description="Folder of a sentence-transformers CrossEncoder.")
    device: str = Field(default="cpu", description="torch device.")
    batch_size: int = Field(default=32, ge=1, description="Pairs per forward pass.")
    max_length: int = Field(default=512, ge=16, description="Tokens per (query, chunk) pair.")

    _model: Any = PrivateAttr(default=None)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, model_path: str | Path, *, model: Any = None, **kwargs: Any) -> None:
        super().__init__(model_path=str(model_path), **kwargs)
        self._model = model

    @classmethod
    def class_name(cls) -> str:
        return "CrossEncoderChunkReranker"

    @property
    def model_name(self) -> str:
        return f"cross-encoder:{Path(self.model_path).name}"

    @property
    def is_loaded(self) -> bool:
        return self._model is not None

    @property
    def model(self) -> Any:
        """The loaded CrossEncoder (loads on first access)."""
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._model = self._load()
        return self._model

    def _load(self) -> Any:
        path = Path(self.model_path).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(
                f"cross_encoder_path {path} is not a folder: give a local sentence-transformers CrossEncoder "
                "(ragidx cannot download one), or use reranker='offline'"
            )
        _refuse_bi_encoder(path)
        require_extra(
            "local", "reranker='cross-encoder'", "sentence_transformers",
            instead="rerank with a service: reranker='endpoint' and [rerank] api_base",
        )  # fmt: skip
        from sentence_transformers import CrossEncoder

        logger.info("loading cross-encoder from %s on %s", path, self.device)
        return CrossEncoder(str(path), device=self.device, max_length=self.max_length)

    def _score(self, query: str, nodes: Sequence[NodeWithScore]) -> list[tuple[int, float]]:
        pairs = [(query, chunk_text(n)) for n in nodes]
        scores = self.model.predict(pairs, batch_size=self.batch_size, show_progress_bar=False)
        # predict returns one score per pair, in the order given: the index is the pair's position.
        return [(i, float(s)) for i, s in enumerate(scores)]


def _refuse_bi_encoder(path: Path) -> None:
    config = path / "config.json"
    if not config.is_file():
        return
    try:
        architectures = json.loads(config.read_text(encoding="utf-8")).get("architectures") or []
    except (OSError, ValueError):
        return
    if architectures and not any("SequenceClassification" in a for a in architectures):
        raise ValueError(
            f"{path} holds {architectures}, not a cross-encoder (no sequence-classification head): "
            "its scores would be random. Give a CrossEncoder folder, or use reranker='offline'"
        )
