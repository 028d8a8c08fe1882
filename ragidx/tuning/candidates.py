"""The retrieval configurations ``ragidx tune`` compares, as values of the tunable ``Settings`` fields.

A :class:`RetrievalConfig` is one point of the grid: hybrid ``alpha`` (0.0 is keyword search alone,
1.0 dense alone), the fusion method, the candidate depth, and the rerank stage (off, or on with a
weighting of the offline reranker's features; another configured reranker is only switched on or off).
:func:`candidate_configs` lays out the grid around the settings, holding every explicitly set field at
its value: what the user fixed, the tuner does not move.

Example:
    >>> from ragidx.config import Settings
    >>> configs = candidate_configs(Settings(reranker="none"))
    >>> {c.reranker for c in configs}, RetrievalConfig.from_settings(Settings()).label
    ({'none'}, 'rsf a0.5 c100 offline(1,0.1,0.1,0)')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ragidx.config import Settings

__all__ = ["ALPHAS", "DEPTHS", "OFFLINE_WEIGHTS", "RetrievalConfig", "candidate_configs"]

ALPHAS = (0.0, 0.2, 0.35, 0.5, 0.65, 0.8, 1.0)
"""Hybrid weights tried: keyword search alone, five mixes, dense search alone."""
DEPTHS = (30, 50, 100)
"""Candidate chunks tried (more costs rerank time: keep ``retrieve()`` within its latency budget)."""
OFFLINE_WEIGHTS: tuple[tuple[float, float, float, float], ...] = (
    (1.0, 0.25, 0.25, 0.0),  # the shipped default until 2026-11-26
    (1.0, 0.1, 0.1, 0.0),  # a light touch: the shipped default
    (1.0, 0.5, 0.25, 0.0),  # more pool BM25
    (1.0, 1.0, 0.5, 0.25),  # fitted to HotpotQA: entity titles, keyword questions
)
"""Offline reranker weightings tried, as (retrieval, lexical, title, phrase)."""

_WEIGHT_FIELDS = ("rerank_retrieval_weight", "rerank_lexical_weight", "rerank_title_weight", "rerank_phrase_weight")


@dataclass(frozen=True)
class RetrievalConfig:
    """One candidate configuration of the search → rerank chain.

    Example:
        >>> RetrievalConfig(0.0, "relative_score", 50, "none").label
        'bm25 c50 norerank'
    """

    alpha: float
    fusion: str
    candidate_chunks: int
    reranker: str
    weights: tuple[float, float, float, float] | None = None
    """Offline reranker weights (retrieval, lexical, title, phrase); None for other rerankers or none."""

    @classmethod
    def from_settings(cls, settings: Settings) -> RetrievalConfig:
        """The configuration the settings run (the untuned chain)."""
        weights = tuple(float(getattr(settings, f)) for f in _WEIGHT_FIELDS) if settings.reranker == "offline" else None
        return cls(
            settings.hybrid_alpha,
            settings.hybrid_fusion,
            settings.candidate_chunks,
            settings.reranker,
            weights,  # type: ignore[arg-type]
        )

    @property
    def search(self) -> str:
        """``dense``, ``bm25`` or the fused hybrid search."""
        if self.alpha >= 1.0:
            return "dense"
        if self.alpha <= 0.0:
            return "bm25"
        return f"{'rrf' if self.fusion == 'rrf' else 'rsf'} a{self.alpha:g}"

    @property
    def label(self) -> str:
        """Short human-readable name, e.g. ``rsf a0.5 c50 offline(1,0.25,0.25,0)``."""
        if self.reranker == "none":
            rerank = "norerank"
        elif self.weights is not None:
            rerank = f"{self.reranker}({','.join(f'{w:g}' for w in self.weights)})"
        else:
            rerank = self.reranker
        return f"{self.search} c{self.candidate_chunks} {rerank}"

    def settings_update(self) -> dict[str, Any]:
        """The ``Settings`` fields that run this configuration."""
        update: dict[str, Any] = {
            "hybrid_alpha": self.alpha,
            "hybrid_fusion": self.fusion,
            "candidate_chunks": self.candidate_chunks,
            "reranker": self.reranker,
        }
        if self.weights is not None:
            update.update(zip(_WEIGHT_FIELDS, self.weights, strict=True))
        return update


def candidate_configs(
    settings: Settings,
    *,
    alphas: Sequence[float] = ALPHAS,
    depths: Sequence[int] = DEPTHS,
    offline_weights: Sequence[tuple[float, float, float, float]] = OFFLINE_WEIGHTS,
    fixed: set[str] | None = None,
) -> list[RetrievalConfig]:
    """The grid, the untuned configuration first; fields in ``fixed`` (default: the explicitly set ones) keep
    their value from ``settings``.

    Fusion only matters between the ends (alpha 0 and 1 search one list), so those get one fusion. The
    reranker is switched off or on; the offline one is tried with each of ``offline_weights``.
    """
    fixed = settings.explicit_fields() if fixed is None else fixed
    untuned = RetrievalConfig.from_settings(settings)

    def pick(field: str, values: Sequence[Any], current: Any) -> list[Any]:
        return [current] if field in fixed else list(dict.fromkeys(values))

    alpha_values = pick("hybrid_alpha", alphas, settings.hybrid_alpha)
    fusion_values = pick("hybrid_fusion", ("relative_score", "rrf"), settings.hybrid_fusion)
    depth_values = pick("candidate_chunks", depths, settings.candidate_chunks)
    rerankers = pick("reranker", (settings.reranker, "none"), settings.reranker)
    weight_values: list[tuple[float, float, float, float] | None] = [None]
    if settings.reranker == "offline":
        if any(f in fixed for f in _WEIGHT_FIELDS):
            weight_values = [untuned.weights]
        else:
            weight_values = list(dict.fromkeys([untuned.weights, *offline_weights]))
    out = [untuned]
    for alpha in alpha_values:
        fusions = fusion_values if 0.0 < alpha < 1.0 else [settings.hybrid_fusion]
        for fusion in fusions:
            for depth in depth_values:
                for reranker in rerankers:
                    for weights in weight_values if reranker == "offline" else [None]:
                        config = RetrievalConfig(alpha, fusion, depth, reranker, weights)
                        if config not in out:
                            out.append(config)
    return out
