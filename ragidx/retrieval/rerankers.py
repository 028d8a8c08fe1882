"""The chunk rerankers a setting can name: a registry of factories by name, read when a retriever is built.

``Settings.reranker`` names one: ``offline`` (ragidx's own, no model), ``cohere`` (Cohere's rerank API),
``cross-encoder`` (a local sentence-transformers model), ``none`` (search order), ``endpoint`` (the ``/rerank``
service in ``[rerank]``: Cohere, Jina, Voyage, TEI, Infinity, vLLM; on a failure the offline reranker's or the
search's order, with the reason on the answer), and any a program registers with
:func:`register_reranker` before it builds its settings (``reranker = "mine"`` in ``ragidx.toml`` is then checked
against the registry). A factory takes the ``Settings`` (``rerank_top_n`` and whatever else it reads) and returns a
LlamaIndex ``BaseNodePostprocessor`` that reorders (and may cut) the searched chunks, or None for no rerank.
An object rather than a name is given to ``Engine(settings, reranker=...)`` instead.

This module imports no reranker: each factory imports its own when it is called.

Example:
    >>> from ragidx.config import Settings
    >>> "offline" in reranker_names()
    True
    >>> def keep_order(settings):
    ...     return None  # a factory may decide there is nothing to rerank
    >>> register_reranker("keep-order", keep_order)
    >>> make_reranker(Settings(reranker="keep-order")) is None
    True
    >>> unregister_reranker("keep-order")
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llama_index.core.postprocessor.types import BaseNodePostprocessor

    from ragidx.config import Settings

__all__ = ["RerankerFactory", "make_reranker", "register_reranker", "reranker_names", "unregister_reranker"]

RerankerFactory = Callable[["Settings"], "BaseNodePostprocessor | None"]
"""Makes a chunk reranker from the settings (keeping ``settings.rerank_top_n`` chunks), or None for no rerank."""

_REGISTRY: dict[str, RerankerFactory] = {}
"""Every reranker a setting may name, by name: the built-in ones first, then in the order they were registered."""


def register_reranker(name: str, factory: RerankerFactory) -> None:
    """Let ``Settings.reranker`` name ``name``: a retriever built from such settings reranks with what ``factory``
    makes of them. A later registration of the same name replaces the earlier one (a built-in's too).

    Args:
        name: what the setting says (``reranker = "mine"``): letters, digits, ``-`` and ``_``.
        factory: takes the ``Settings``, returns a LlamaIndex ``BaseNodePostprocessor`` (or None: no rerank).
            It is called each time a retriever is built (``Engine.retriever``, after tuning, in evaluations).

    Raises:
        ValueError: a name that is not a plain word.
        TypeError: a factory that is not callable.
    """
    if not isinstance(name, str) or not re.fullmatch(r"[\w][\w-]*", name):
        raise ValueError(f"reranker name {name!r}: use letters, digits, '-' and '_' (like 'my-reranker')")
    if not callable(factory):
        raise TypeError(f"reranker {name!r}: give a function of the settings that returns a reranker")
    _REGISTRY[name] = factory


def unregister_reranker(name: str) -> None:
    """Settings may no longer name ``name`` (a built-in too); a name not registered is left as it is."""
    _REGISTRY.pop(name, None)


def reranker_names() -> tuple[str, ...]:
    """The names ``Settings.reranker`` may take now.

    Example:
        >>> reranker_names()[:4]
        ('offline', 'cohere', 'cross-encoder', 'none')
    """
    return tuple(_REGISTRY)


def make_reranker(settings: Settings) -> BaseNodePostprocessor | None:
    """The chunk reranker ``settings.reranker`` names, made now from the registry.

    Raises:
        ValueError: no reranker of that name is registered (it was unregistered after the settings were made).
    """
    factory = _REGISTRY.get(settings.reranker)
    if factory is None:
        raise ValueError(f"unknown reranker {settings.reranker!r}: use one of {', '.join(_REGISTRY)}")
    return factory(settings)


def _offline(settings: Settings) -> BaseNodePostprocessor:
    from ragidx.retrieval.offline_reranker import OfflineChunkReranker

    return OfflineChunkReranker(
        top_n=settings.rerank_top_n,
        retrieval_weight=settings.rerank_retrieval_weight,
        lexical_weight=settings.rerank_lexical_weight,
        title_weight=settings.rerank_title_weight,
        phrase_weight=settings.rerank_phrase_weight,
    )


def _cohere(settings: Settings) -> BaseNodePostprocessor:
    from ragidx.retrieval.cohere_reranker import CohereChunkReranker
    from ragidx.retrieval.rerank_fallback import FallbackReranker

    cohere = CohereChunkReranker(
        api_key=settings.cohere_api_key, model=settings.cohere_model, top_n=settings.rerank_top_n
    )
    # A failing Cohere API falls back as a [rerank] service does: [rerank] fallback and cooldown_s.
    return FallbackReranker(cohere, fallback=_fallback(settings), cooldown_s=settings.rerank.cooldown_s)


def _cross_encoder(settings: Settings) -> BaseNodePostprocessor:
    from ragidx.retrieval.cross_encoder_reranker import CrossEncoderChunkReranker

    if not settings.cross_encoder_path:
        raise ValueError("reranker='cross-encoder' needs cross_encoder_path (a local model folder)")
    return CrossEncoderChunkReranker(settings.cross_encoder_path, top_n=settings.rerank_top_n)


def _none(settings: Settings) -> None:
    return None


def _endpoint(settings: Settings) -> BaseNodePostprocessor:
    from ragidx.retrieval.endpoint_reranker import endpoint_reranker

    return endpoint_reranker(settings.rerank, top_n=settings.rerank_top_n, fallback=_fallback(settings))


def _fallback(settings: Settings) -> BaseNodePostprocessor | None:
    """What ranks when a reranking service fails: the offline reranker, or None for the search order."""
    return _offline(settings) if settings.rerank.fallback == "offline" else None


for _name, _factory in (
    ("offline", _offline),
    ("cohere", _cohere),
    ("cross-encoder", _cross_encoder),
    ("none", _none),
    ("endpoint", _endpoint),
):
    register_reranker(_name, _factory)
